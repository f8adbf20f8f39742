"""The policy contract: what a policy declares it reads and returns, what an env gives it, and how the two are compared
before the first episode (the "contract" step of runner.engine.preflight).

Both sides name observations by runner's keys (runner.envs.base): `pixels` (the one image), `pixels.<camera>` (a
camera of a dict of images, named after `env.camera_name_mapping`), `agent_pos`, `environment_state`. A policy's
`Input` says which of these it reads (`source`), under which name it knows it (LeRobot's `observation.images.top`)
and with which shape; its `names` say how it names any env key, so a message shows both sides in its words.

Only what would fail, or silently change what the policy sees, is a mismatch: a key the policy reads that the env
does not give, an image of another height or width (unless the policy resizes images itself), a state of another
size, an action of another size. Keys the env gives and the policy does not read are fine. Each side may declare
nothing (None): that part is not checked, and the step's line says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PIXELS, AGENT_POS, ENV_STATE = "pixels", "agent_pos", "environment_state"  # runner.envs.base's keys
IMAGE, STATE = "image", "state"
HWC, CHW = "HWC", "CHW"
MAX_INPUTS = 64


@dataclass(frozen=True)
class Input:
    """One input a policy reads."""

    name: str  # as the policy names it ("observation.images.top", a request key)
    source: str | None  # the env observation it comes from: pixels, pixels.<camera>, agent_pos, ...; None: none
    shape: tuple[int, ...]  # as the policy declares it (images in `layout`)
    kind: str = STATE  # IMAGE or STATE
    layout: str = HWC  # images: HWC or CHW
    resized: bool = False  # an image resized to the policy's size on the way (any size fits)

    @property
    def size(self) -> tuple[int, int] | None:
        """An image's (height, width); None for a state or a shape that is not an image's."""
        if self.kind != IMAGE or len(self.shape) != 3:
            return None
        return (self.shape[1], self.shape[2]) if self.layout == CHW else (self.shape[0], self.shape[1])


@dataclass(frozen=True)
class PolicyContract:
    """What a policy declares (the policy hook `Policy.contract()`); None in a field: not declared."""

    inputs: tuple[Input, ...] | None = None  # None: declares no inputs
    action_dim: int | None = None  # numbers in one action
    chunk_size: int | None = None  # actions predicted per inference
    n_action_steps: int | None = None  # of those, executed before the next inference
    image_format: str | None = None  # how it takes images, e.g. "float32 CHW in [0, 1]"
    who: str = "the policy"  # how messages name it: "the checkpoint", "the policy server at ws://..."
    names: Mapping[str, str] = field(default_factory=dict)  # env key (or prefix ending in ".") -> its name for it
    renames: Mapping[str, str] = field(default_factory=dict)  # then renamed (LeRobot's policy.rename_map)
    rename_option: str | None = None  # the spec option that renames on the policy's side ("policy.rename_map")
    rename_form: str = "{env}: {policy}"  # one entry of it: {env} the env's key in the policy's words, {source}
    # runner's key for it, {policy} the policy's name

    def name_of(self, key: str, *, renamed: bool = True) -> str:
        """The policy's name for an env observation key (the key itself when it has none), `renamed` or before."""
        name = self.names.get(key)
        if name is None:
            prefix, dot, rest = key.partition(".")
            name = self.names[prefix + dot] + rest if dot and prefix + dot in self.names else key
        return self.renames.get(name, name) if renamed else name


@dataclass(frozen=True)
class EnvProvides:
    """What an env gives the policy, known from the spec alone (the env hook `EnvAdapter.provides()`)."""

    observations: Mapping[str, tuple[int, ...] | None]  # runner key -> shape (images (H, W, 3)); None: size unknown
    action_dim: int | None = None  # numbers in one action; None: unknown
    cameras: Mapping[str, str] = field(default_factory=dict)  # image key -> the simulator camera it comes from
    image_size: tuple[str, str] | None = None  # the spec options that set the images' height and width
    note: str = ""  # how the keys came about ("after env.camera_name_mapping")
    one_image: bool = False  # without env.camera_name_mapping it gives one image, `pixels` (Meta-World)


@dataclass(frozen=True)
class Verdict:
    """The comparison: the problems (each names both sides) and what was checked or not."""

    family: str
    problems: tuple[str, ...]
    checked: tuple[str, ...]
    unchecked: tuple[str, ...]
    notes: tuple[str, ...] = ()  # what the policy declares besides (its chunking)

    @property
    def ok(self) -> bool:
        return not self.problems

    def message(self) -> str:
        """The one message of a mismatch."""
        return "policy contract: " + "; and ".join(self.problems)

    def line(self) -> str:
        """The step's line when nothing mismatches."""
        fits = [f"fits env {self.family}: {', '.join(self.checked)}"] if self.checked else []
        return "; ".join((*fits, *self.notes, *(f"{what}: not checked" for what in self.unchecked))) or \
            "the policy declares nothing to check"


def compare(policy: PolicyContract | None, env: EnvProvides | None, family: str) -> Verdict:
    """The policy's declared inputs and action against what env `family` gives (see the module docstring)."""
    if policy is None:
        return Verdict(family, (), (), ("the policy declares no inputs or actions",))
    problems: list[str] = []
    checked: list[str] = []
    unchecked: list[str] = []
    if env is None:
        unchecked.append(f"env {family} declares nothing before it runs (the first step checks its keys)")
    elif policy.inputs is None:
        unchecked.append(f"{policy.who} declares no inputs")
    else:
        problems.extend(_inputs(policy, env, family, checked, unchecked))
    if policy.action_dim is None:
        unchecked.append(f"{policy.who} declares no action size")
    elif env is not None and env.action_dim is None:
        unchecked.append(f"env {family}'s action size is known only when it runs")
    elif env is not None:
        if policy.action_dim != env.action_dim:
            problems.append(f"{policy.who} returns actions of {policy.action_dim} numbers but env {family} takes "
                            f"{env.action_dim}; use a policy made for {family}")
        else:
            checked.append(f"actions of {env.action_dim}")
    notes = []
    if policy.chunk_size is not None:
        steps = f", {policy.n_action_steps} executed" if policy.n_action_steps is not None else ""
        notes.append(f"chunks of {policy.chunk_size}{steps}")
    if policy.image_format is not None and any(i.kind == IMAGE for i in policy.inputs or ()):
        notes.append(f"images as {policy.image_format}")
    return Verdict(family, tuple(problems), tuple(checked), tuple(unchecked), tuple(notes))


def _inputs(policy: PolicyContract, env: EnvProvides, family: str, checked: list[str],
            unchecked: list[str]) -> list[str]:
    problems: list[str] = []
    images = [k for k in env.observations if _is_image(k)]
    read = {i.source for i in policy.inputs or () if i.source is not None}
    unused = [k for k in images if k not in read]
    after = f" {env.note}" if env.note else ""
    for item in policy.inputs or ():
        reads = f"{policy.who} reads {item.name} {_shape(item.shape)}"
        if item.source is None:
            problems.append(f"{reads}, which no env observation is mapped to; "
                            f"{_rename_fix(policy, None, item) or f'use a policy made for {family}'}")
            continue
        if item.source not in env.observations:
            if _is_image(item.source):
                gives = ", ".join(f"{policy.name_of(k)} {_shape(_in_layout(env.observations[k], item))}"
                                  for k in images) or "no images"
                fix = _camera_fix(policy, env, item, unused)
                problems.append(f"{reads} but env {family} gives {gives}{after}; {fix}")
            else:
                fix = _rename_fix(policy, None, item) or f"use a policy made for {family}"
                problems.append(f"{reads} but env {family} gives no {item.source}; {fix}")
            continue
        given = env.observations[item.source]
        if given is None:
            unchecked.append(f"the size of {item.name} (env {family}'s {item.source} is known only when it runs)")
            continue
        problem = _shape_problem(policy, env, family, item, given, reads)
        if problem:
            problems.append(problem)
        else:
            checked.append(f"{item.name} {_shape(item.shape)}" + (" (the policy resizes)" if item.resized else ""))
    return problems


def _shape_problem(policy: PolicyContract, env: EnvProvides, family: str, item: Input, given: tuple[int, ...],
                   reads: str) -> str | None:
    name = policy.name_of(item.source or "")
    if item.kind == IMAGE or _is_image(item.source or ""):
        size = item.size
        shown = _shape(_in_layout(given, item))
        if size is None or len(given) != 3:
            return None if tuple(given) == item.shape else \
                f"{reads} but env {family} gives {name} {shown}; use a policy made for {family}"
        channels = item.shape[0] if item.layout == CHW else item.shape[2]
        if channels != given[2]:
            return f"{reads} but env {family} gives {name} {shown} ({given[2]} channels, not {channels}); use a " \
                   f"policy made for {family}"
        if item.resized or size == (given[0], given[1]):
            return None
        height, width = env.image_size or ("", "")
        where = f"set {height}: {size[0]} and {width}: {size[1]} (the env's side), or " if env.image_size else ""
        return (f"{reads} but env {family} gives {name} {shown}, and the policy does not resize images: {where}use "
                f"a policy trained on {given[0]}x{given[1]} images")
    if tuple(given) == item.shape:
        return None
    its = f" (its {item.source})" if name != item.source else ""
    return (f"{reads} but env {family} gives {name} {_shape(given)}{its}: the policy was made for another env's "
            f"state; use one made for {family}")


def _camera_fix(policy: PolicyContract, env: EnvProvides, item: Input, unused: Sequence[str]) -> str:
    """How to give the policy the camera it reads: the env's camera_name_mapping and/or the policy's renaming."""
    options = []
    source = item.source or ""
    if len(unused) == 1 and source.startswith(PIXELS + ".") and unused[0] in env.cameras:
        options.append(f"set env.camera_name_mapping: {{{env.cameras[unused[0]]}: {source.partition('.')[2]}}}")
    if source == PIXELS and env.one_image and env.note:
        options.append("leave out env.camera_name_mapping (the env then gives its one image)")
    rename = _rename_fix(policy, unused[0] if len(unused) == 1 else None, item)
    if rename:
        options.append(rename)
    if not options:
        known = ", ".join(env.cameras.values())
        return "name the env's cameras with env.camera_name_mapping" + (f" (cameras: {known})" if known else "")
    return " or ".join(options)


def _rename_fix(policy: PolicyContract, key: str | None, item: Input) -> str | None:
    if policy.rename_option is None:
        return None
    if key is None:
        return f"map the env's keys to the policy's with {policy.rename_option}"
    entry = policy.rename_form.format(env=policy.name_of(key, renamed=False), source=key, policy=item.name)
    return f"map it with {policy.rename_option}: {{{entry}}}"


def _is_image(key: str) -> bool:
    return key == PIXELS or key.startswith(PIXELS + ".")


def _in_layout(shape: tuple[int, ...] | None, item: Input) -> tuple[int, ...] | None:
    """An env image's (H, W, C) shown as the policy lays its images out."""
    if shape is None or len(shape) != 3 or item.layout != CHW:
        return shape
    return (shape[2], shape[0], shape[1])


def _shape(shape: Sequence[int] | None) -> str:
    """(3x480x640), (4,); (size unknown)."""
    if shape is None:
        return "(size unknown)"
    return f"({shape[0]},)" if len(shape) == 1 else f"({'x'.join(str(n) for n in shape)})"


# -- as plain data (a policy server's metadata) ---------------------------------------------------------------------


def to_data(contract: PolicyContract | None) -> dict[str, Any] | None:
    """A contract as msgpack-able data (what `runner serve` puts in its metadata under "contract")."""
    if contract is None:
        return None
    data: dict[str, Any] = {}
    if contract.inputs is not None:
        data["inputs"] = {i.source or i.name: {"name": i.name, "shape": list(i.shape), "kind": i.kind,
                                               "layout": i.layout, "resized": i.resized}
                          for i in contract.inputs}
    for key in ("action_dim", "chunk_size", "n_action_steps", "image_format"):
        if getattr(contract, key) is not None:
            data[key] = getattr(contract, key)
    if contract.names:
        data["names"] = dict(contract.names)
    if contract.renames:
        data["renames"] = dict(contract.renames)
    return data


def from_data(data: Any, *, who: str, sources: Mapping[str, tuple[str | None, bool]] | None = None) -> PolicyContract:
    """A declared contract (see `to_data`; what a policy server's metadata says under "contract"); ValueError naming
    the field when it is malformed. `sources`: request key -> (the env key it is taken from, resized) when the client
    sends a request mapping; without one, the declared keys are runner's own observation keys."""
    if not isinstance(data, Mapping):
        raise ValueError("not a map")
    inputs = None
    declared = data.get("inputs")
    if declared is not None:
        if not isinstance(declared, Mapping) or len(declared) > MAX_INPUTS:
            raise ValueError(f"inputs: not a map of at most {MAX_INPUTS} keys")
        inputs = tuple(_input(str(key), value, sources) for key, value in declared.items())
    names, renames = _names(data, "names"), _names(data, "renames")
    if sources is not None:  # request keys: the server knows the env's keys by the request's
        names, renames = {source: key for key, (source, _) in sources.items() if source is not None}, {}
    return PolicyContract(inputs=inputs, action_dim=_count(data, "action_dim"), chunk_size=_count(data, "chunk_size"),
                          n_action_steps=_count(data, "n_action_steps"),
                          image_format=str(data["image_format"])[:200] if data.get("image_format") else None,
                          who=who, names=names, renames=renames)


def _names(data: Mapping[str, Any], key: str) -> dict[str, str]:
    names = data.get(key) or {}
    if not isinstance(names, Mapping) or len(names) > MAX_INPUTS or \
            not all(isinstance(k, str) and isinstance(v, str) for k, v in names.items()):
        raise ValueError(f"{key}: not a map of names")
    return {k[:200]: v[:200] for k, v in names.items()}


def _input(key: str, value: Any, sources: Mapping[str, tuple[str | None, bool]] | None) -> Input:
    if not isinstance(value, Mapping):
        raise ValueError(f"inputs.{key}: not a map")
    shape = value.get("shape")
    if not isinstance(shape, list | tuple) or not 0 < len(shape) <= 4 or \
            not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape):
        raise ValueError(f"inputs.{key}.shape: not a list of 1 to 4 positive integers")
    layout = value.get("layout", HWC)
    if layout not in (HWC, CHW):
        raise ValueError(f"inputs.{key}.layout: HWC or CHW, not {str(layout)[:20]!r}")
    if sources is None:
        source, resized = key, bool(value.get("resized", False))
    else:
        source, resized = sources.get(key, (None, False))
    kind = value.get("kind") or (IMAGE if source is not None and _is_image(source) else STATE)
    if kind not in (IMAGE, STATE):
        raise ValueError(f"inputs.{key}.kind: image or state, not {str(kind)[:20]!r}")
    name = str(value.get("name", key))[:200] if sources is None else key
    return Input(name, source, tuple(shape), kind, layout, resized)


def _count(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= 1_000_000:
        raise ValueError(f"{key}: not a positive integer")
    return value


__all__ = ["CHW", "HWC", "IMAGE", "STATE", "EnvProvides", "Input", "PolicyContract", "Verdict", "compare",
           "from_data", "to_data"]
