"""The remote-policy wire format: msgpack maps, with NumPy arrays encoded exactly as openpi's `msgpack_numpy`.

An ndarray travels as the map {b"__ndarray__": True, b"data": raw bytes, b"dtype": dtype.str, b"shape": shape};
a NumPy scalar as {b"__npgeneric__": True, b"data": x.item(), b"dtype": dtype.str}. Everything else is plain
msgpack (maps, lists, strings, numbers). vla-eval's variant (`pack(..., vla_eval=True)`) writes the same array map
with string keys, NumPy scalars as plain numbers, and HWC uint8 images (1, 3 or 4 channels) as
{"__image__": True, "format": "png" | "jpeg" | "raw", "data": bytes, "shape": shape} when an image format is asked
for; `unpack` reads all of these. Messages come from anyone, so decoding is bounded: a size limit, msgpack's
own length limits, only plain numeric, boolean and string dtypes (never object, void or structured ones, so no
pickle), and a shape that must match the bytes it claims.
"""

from __future__ import annotations

import math
from typing import Any

import msgpack
import numpy as np

ARRAY, GENERIC, IMAGE = b"__ndarray__", b"__npgeneric__", b"__image__"
DATA, DTYPE, SHAPE, FORMAT = b"data", b"dtype", b"shape", b"format"
IMAGE_FORMATS = ("raw", "png", "jpeg")
MAX_IMAGE_PIXELS = 64 * 1024 * 1024  # of one compressed image, decoded (a 8192x8192 frame)
KINDS = frozenset("biufUS")  # bool, int, uint, float, str, bytes (openpi refuses V, O, c; so do we, and M, m)
MAX_DIMS = 32
MAX_DTYPE_CHARS = 16
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# Items of one list and keys of one map: a message of many tiny objects would cost far more memory than its bytes.
MAX_ITEMS, MAX_KEYS = 1_000_000, 10_000


class WireError(ValueError):
    """A message that is not a valid message of this format (or is too large)."""


def _encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        _check_kind(obj.dtype)
        return {ARRAY: True, DATA: obj.tobytes(), DTYPE: obj.dtype.str, SHAPE: list(obj.shape)}
    if isinstance(obj, np.generic):
        _check_kind(obj.dtype)
        return {GENERIC: True, DATA: obj.item(), DTYPE: obj.dtype.str}
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot send a {type(obj).__name__} (send maps, lists, strings, numbers and NumPy arrays)")


def _check_kind(dtype: np.dtype) -> None:
    if dtype.kind not in KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise WireError(f"unsupported dtype {dtype.str!r} (numbers, booleans and strings only)")


def _encoder(image_format: str) -> Any:
    """vla-eval's encoding: string keys, NumPy scalars as numbers, images in `image_format`."""

    def encode(obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            _check_kind(obj.dtype)
            if image_format != "raw" and is_image(obj):
                return encode_image(obj, image_format)
            return {"__ndarray__": True, "data": obj.tobytes(), "dtype": obj.dtype.str, "shape": list(obj.shape)}
        if isinstance(obj, np.generic):
            _check_kind(obj.dtype)
            return obj.item()
        if isinstance(obj, tuple):
            return list(obj)
        raise TypeError(f"cannot send a {type(obj).__name__} (send maps, lists, strings, numbers and NumPy arrays)")

    return encode


def is_image(array: np.ndarray) -> bool:
    """vla-eval's rule for what travels as an image: HWC uint8 with 1, 3 or 4 channels."""
    return array.ndim == 3 and array.dtype == np.uint8 and array.shape[2] in (1, 3, 4)


def encode_image(image: np.ndarray, image_format: str) -> dict[str, Any]:
    import io

    from PIL import Image

    pil = Image.fromarray(np.ascontiguousarray(image[..., 0] if image.shape[2] == 1 else image))
    buffer = io.BytesIO()
    if image_format == "jpeg":
        if pil.mode != "RGB":
            raise WireError(f"JPEG takes RGB images, not {image.shape[2]} channels (use png or raw)")
        pil.save(buffer, format="JPEG", quality=95)
    else:
        pil.save(buffer, format="PNG")
    return {"__image__": True, "format": image_format, "data": buffer.getvalue(), "shape": list(image.shape)}


def pack(message: Any, *, vla_eval: bool = False, image_format: str = "raw") -> bytes:
    """The bytes of one message (a map, normally); `vla_eval`: vla-eval's variant of the encoding."""
    try:
        return msgpack.packb(message, default=_encoder(image_format) if vla_eval else _encode, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise WireError(f"cannot encode the message: {exc}") from None


def unpack(data: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """One message from its bytes; WireError for anything malformed, oversized or not allowed."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError(f"expected a binary frame, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise WireError(f"message of {len(data):,} bytes is over the limit of {max_bytes:,}")
    try:
        return msgpack.unpackb(data, object_hook=_decode, raw=False, strict_map_key=True, use_list=True,
                               max_array_len=MAX_ITEMS, max_map_len=MAX_KEYS, max_ext_len=0)
    except WireError:
        raise
    except (ValueError, TypeError, msgpack.exceptions.ExtraData, msgpack.exceptions.StackError) as exc:
        raise WireError(f"not a msgpack message: {type(exc).__name__}: {exc}") from None


def _field(obj: dict, key: bytes) -> Any:
    """A field of an encoded array by its bytes key (openpi's) or the same key as a string."""
    if key in obj:
        return obj[key]
    return obj.get(key.decode())


def _decode(obj: dict) -> Any:
    if _field(obj, ARRAY) is True:
        return _decode_array(obj)
    if _field(obj, GENERIC) is True:
        return _decode_generic(obj)
    if _field(obj, IMAGE) is True:
        return _decode_image(obj)
    return obj


def _decode_image(obj: dict) -> np.ndarray:
    """vla-eval's encoded image: raw bytes as an array, or a PNG / JPEG whose decoded shape must be the one declared
    (bounded before decoding: no decompression bomb)."""
    fmt = _field(obj, FORMAT)
    if fmt == "raw":
        return _decode_array(obj)
    if fmt not in IMAGE_FORMATS:
        raise WireError(f"an encoded image's format must be one of {', '.join(IMAGE_FORMATS)}, not {str(fmt)[:20]!r}")
    shape, data = _field(obj, SHAPE), _field(obj, DATA)
    if not (isinstance(shape, list) and len(shape) == 3 and all(isinstance(n, int) and 0 < n for n in shape)
            and shape[2] in (1, 3, 4) and math.prod(shape) <= MAX_IMAGE_PIXELS * 4):
        raise WireError("an encoded image's shape must be [height, width, 1 | 3 | 4] of at most "
                        f"{MAX_IMAGE_PIXELS:,} pixels")
    if not isinstance(data, bytes):
        raise WireError("an encoded image's data must be bytes")
    import io
    import warnings

    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            pil = Image.open(io.BytesIO(data), formats=["PNG" if fmt == "png" else "JPEG"])
            if (pil.height, pil.width) != tuple(shape[:2]):
                raise WireError(f"an encoded {fmt} image is {pil.height}x{pil.width}, not the {shape[0]}x{shape[1]} "
                                "its shape says")
            array = np.asarray(pil)
    except WireError:
        raise
    except Exception as exc:  # noqa: BLE001 - PIL raises many kinds for a malformed image
        raise WireError(f"an encoded {fmt} image does not decode: {type(exc).__name__}: {exc}") from None
    if array.ndim == 2:
        array = array[..., None]
    if array.dtype != np.uint8 or array.shape != tuple(shape):
        raise WireError(f"an encoded {fmt} image decodes to {array.dtype} {array.shape}, not uint8 {tuple(shape)}")
    return np.array(array)


def _dtype(obj: dict) -> np.dtype:
    text = _field(obj, DTYPE)
    if isinstance(text, bytes):
        text = text.decode("ascii", errors="replace")
    if not isinstance(text, str) or not 0 < len(text) <= MAX_DTYPE_CHARS:
        raise WireError("an encoded array needs a dtype string")
    try:
        dtype = np.dtype(text)
    except (TypeError, ValueError, SyntaxError):
        raise WireError(f"unknown dtype {text!r}") from None
    _check_kind(dtype)
    return dtype


def _decode_array(obj: dict) -> np.ndarray:
    dtype = _dtype(obj)
    data, shape = _field(obj, DATA), _field(obj, SHAPE)
    if not isinstance(data, bytes):
        raise WireError("an encoded array's data must be bytes")
    if (not isinstance(shape, list) or len(shape) > MAX_DIMS
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise WireError(f"an encoded array's shape must be a list of at most {MAX_DIMS} sizes >= 0")
    if math.prod(shape) * dtype.itemsize != len(data):
        raise WireError(f"an array of shape {tuple(shape)} and dtype {dtype.str} needs "
                        f"{math.prod(shape) * dtype.itemsize:,} bytes, not {len(data):,}")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()  # writable: torch.from_numpy warns otherwise


def _decode_generic(obj: dict) -> np.generic:
    dtype = _dtype(obj)
    value = _field(obj, DATA)
    if not isinstance(value, (bool, int, float, str, bytes)):
        raise WireError("an encoded scalar's data must be a number, boolean or string")
    try:
        return dtype.type(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise WireError(f"scalar {value!r} does not fit dtype {dtype.str}: {exc}") from None


__all__ = ["DEFAULT_MAX_BYTES", "IMAGE_FORMATS", "WireError", "encode_image", "is_image", "pack", "unpack"]
