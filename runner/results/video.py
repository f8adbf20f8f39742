"""Streaming mp4 writer: frames go to ffmpeg (libx264, yuv420p) as they come, never buffered per episode.

`add()` hands a copy of the frame to a feeder thread, which writes it to ffmpeg's stdin: the episode goes on while
ffmpeg takes the frame in and encodes it (a pipe write of a 480x480 frame otherwise blocks ~3 ms until ffmpeg has
read it); at most QUEUED frames wait, so memory stays bounded when encoding falls behind.
The file is written under a temporary name and renamed on `close()`, so an mp4 at the final path is
always complete; `abort()` (or leaving the `with` block by an exception) discards it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

QUEUED = 8  # frames waiting for the encoder (8 x 0.7 MB at 480x480)
_END = None


class VideoWriter:
    """`add((H, W, 3) uint8)` frames, `close()` to finalise. fps is the env's control rate."""

    def __init__(self, path: Path, fps: float, *, quality: float = 5.0) -> None:
        if not fps > 0:
            raise ValueError(f"fps must be > 0, got {fps}")
        self.path = Path(path)
        self.fps = float(fps)
        self.quality = quality
        self.n_frames = 0
        self._shape: tuple[int, ...] | None = None
        self._gen: Any = None
        self._tmp = self.path.with_name(f".{self.path.stem}.partial{self.path.suffix}")
        self._closed = False
        self._queue: queue.Queue[np.ndarray | None] = queue.Queue(QUEUED)
        self._feeder: threading.Thread | None = None
        self._failure: BaseException | None = None

    def _start(self, shape: tuple[int, ...]) -> None:
        import imageio_ffmpeg  # lazily: only runs that record videos need ffmpeg

        h, w = shape[:2]
        # x264's veryfast preset: a 480x480 frame costs 2.6 ms of CPU instead of the default's 5.7 (measured here),
        # and the encoder shares the CPU with rendering; at the same quality its files are no larger. One encoder
        # thread: the worker's rendering already keeps its CPU busy (5.2 instead of 5.6 ms a frame, all in, in
        # benchmarks/videos.py's frames), and the feeder's queue hides the encoder's latency.
        output_params = ["-f", "mp4", "-preset", "veryfast", "-threads", "1"]
        if h % 2 or w % 2:  # yuv420p needs even sizes: pad one edge row/column, don't resample
            output_params += ["-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2"]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._gen = imageio_ffmpeg.write_frames(
            str(self._tmp),
            (w, h),
            pix_fmt_in="rgb24",
            pix_fmt_out="yuv420p",
            fps=self.fps,
            quality=self.quality,
            codec="libx264",
            macro_block_size=1,
            ffmpeg_log_level="error",
            output_params=output_params,
        )
        self._gen.send(None)  # start ffmpeg
        self._shape = shape
        self._feeder = threading.Thread(target=self._feed, name=f"video {self.path.name}", daemon=True)
        self._feeder.start()

    def _feed(self) -> None:
        """The feeder thread: frames to ffmpeg until the end marker; a failure is kept for add() / close()."""
        while (frame := self._queue.get()) is not _END:
            if self._failure is None:
                try:
                    self._gen.send(frame)
                except BaseException as exc:  # noqa: BLE001 - reported by the thread that owns the writer
                    self._failure = exc

    def add(self, frame: np.ndarray) -> None:
        if self._closed:
            raise ValueError(f"{self.path}: video writer is closed")
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise ValueError(
                f"{self.path}: a video frame must be an (H, W, 3) uint8 array, got {frame.shape} {frame.dtype}"
            )
        if self._shape is None:
            self._start(frame.shape)
        elif frame.shape != self._shape:
            raise ValueError(f"{self.path}: frame shape changed from {self._shape} to {frame.shape}")
        if self._failure is not None:
            raise self._failure
        self._queue.put(np.array(frame, order="C"))  # a copy: the env may reuse its buffer for the next frame
        self.n_frames += 1

    def _stop_feeder(self) -> None:
        if self._feeder is not None:
            self._queue.put(_END)
            self._feeder.join()
            self._feeder = None

    def close(self) -> None:
        """Finish the file. With no frames added, no file is written (`n_frames` is 0)."""
        if self._closed:
            return
        self._closed = True
        if self._gen is None:
            return
        try:
            self._stop_feeder()
            if self._failure is not None:
                raise self._failure
            self._gen.close()  # waits for ffmpeg to finish
            os.replace(self._tmp, self.path)
        except BaseException:
            self._discard()
            raise

    def abort(self) -> None:
        """Stop and remove the unfinished video."""
        if self._closed:
            return
        self._closed = True
        self._discard()

    def _discard(self) -> None:
        self._failure = self._failure or RuntimeError("aborted")  # the feeder drops what is still queued
        with contextlib.suppress(Exception):
            self._stop_feeder()
        if self._gen is not None:
            with contextlib.suppress(Exception):
                self._gen.close()
        with contextlib.suppress(OSError):
            self._tmp.unlink()

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
