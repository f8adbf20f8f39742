"""What a spec needs installed to run, checked against its install plan by `runner validate` and `runner gen-ci`,
so that a spec whose image (or `runner install` venv) could not run it never passes: the packages its env and
policy import, the system packages and settings offscreen rendering needs, Python version limits, and user
code that must reach the image. Each problem names the missing piece and the spec key to change.

Gym ids are looked up in Gymnasium's own registry (ids of the form `module:Id` are not imported here: that
would run the module).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from packaging.utils import canonicalize_name

from runner.install.plan import InstallPlan
from runner.spec import Spec
from runner.spec.problems import Problem, dotted

EGL_APT = ("libegl1", "libegl-mesa0", "libgl1", "libgl1-mesa-dri")  # Mesa's EGL for offscreen MuJoCo
BUILD_APT = ("cmake", "make", "g++")  # hf-libero's hf-egl-probe builds from source
RENDER_ENV = {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}
IMAGE_POLICIES = ("lerobot",)  # policy types known to look at images (a python policy says so only at run time)
# Gymnasium's entry-point families -> the distributions they import ("gymnasium[<extra>]").
GYM_FAMILIES = {
    "gymnasium.envs.mujoco": (("mujoco",), "mujoco"),
    "gymnasium.envs.box2d": (("box2d",), "box2d"),
}
GYM_RENDER = {"gymnasium.envs.classic_control": (("pygame",), "classic-control"),
              "gymnasium.envs.toy_text": (("pygame",), "toy-text")}


@dataclass(frozen=True)
class Missing:
    path: tuple  # the spec key to change
    message: str


ENV_DISTRIBUTIONS = {"metaworld": ("metaworld", "mujoco"), "libero": ("hf-libero", "mujoco")}
POLICY_DISTRIBUTIONS = {"lerobot": ("lerobot",), "scripted": ("metaworld",)}


def distributions(spec: Spec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(what the env imports, what the policy imports): distribution names, Gym ids of other packages aside."""
    env = ENV_DISTRIBUTIONS.get(spec.env.type, ())
    if spec.env.type == "gym":
        env = tuple(n for env_id in spec.env.tasks for n in GYM_FAMILIES.get(_gym_family(env_id) or "", ((),))[0])
    return env, POLICY_DISTRIBUTIONS.get(spec.policy.type, ())


def renders(spec: Spec) -> bool:
    """Whether a run of the spec is known to render images: videos, or a policy that looks at them."""
    return spec.eval.videos > 0 or spec.policy.type in IMAGE_POLICIES


def missing(spec: Spec, plan: InstallPlan | None = None) -> list[Missing]:
    plan = plan or InstallPlan.of(spec)
    dists = plan.distributions()
    excluded = plan.excluded()
    out: list[Missing] = []

    def need(names: Sequence[str], who: str, fix: str) -> None:
        absent = [n for n in names if canonicalize_name(n) not in dists]
        for name in [n for n in absent if canonicalize_name(n) in excluded]:
            out.append(Missing(("install", "python"), f"{who} needs {name!r}, which "
                               f"{excluded[canonicalize_name(name)]!r} installs only on another Python than "
                               f"install.python {plan.python!r}"))
        undeclared = [n for n in absent if canonicalize_name(n) not in excluded]
        if undeclared:
            what = "package " + repr(undeclared[0]) if len(undeclared) == 1 else \
                "packages " + ", ".join(map(repr, undeclared))
            out.append(Missing(("install",), f"{who} needs the {what}, which the install section does not "
                               f"declare; {fix}"))

    mujoco_renders = False
    if spec.env.type == "metaworld":
        need(ENV_DISTRIBUTIONS["metaworld"], "env.type metaworld", "add install.extras: [metaworld]")
        mujoco_renders = renders(spec)
    elif spec.env.type == "libero":
        need(ENV_DISTRIBUTIONS["libero"], "env.type libero", "add install.extras: [libero]")
        absent = [p for p in BUILD_APT if p not in plan.apt]
        if absent:
            out.append(Missing(("install", "apt"), f"env.type libero needs {', '.join(absent)} to build hf-libero's "
                               f"hf-egl-probe; add them to install.apt"))
        mujoco_renders = True  # robosuite renders its cameras offscreen
    elif spec.env.type == "gym":
        for env_id in spec.env.tasks:
            family = _gym_family(env_id)
            if family is None:
                continue
            if family in GYM_FAMILIES:
                names, extra = GYM_FAMILIES[family]
                pins = {"mujoco": "mujoco==3.8.1"}
                fix = (f"add install.pip: [{', '.join(pins.get(n, n + '==<version>') for n in names)}] "
                       f"(what gymnasium[{extra}] installs)")
                need(names, f"Gym env {env_id!r}", fix)
                mujoco_renders = mujoco_renders or (family.endswith("mujoco") and renders(spec))
            elif family in GYM_RENDER and renders(spec):
                names, extra = GYM_RENDER[family]
                need(names, f"rendering Gym env {env_id!r}", f"add install.pip: [pygame==<version>] "
                     f"(what gymnasium[{extra}] installs)")
    if mujoco_renders:
        absent = [p for p in EGL_APT if p not in plan.apt]
        if absent:
            out.append(Missing(("install", "apt"), f"offscreen rendering with MuJoCo needs Mesa's EGL: add "
                               f"{', '.join(absent)} to install.apt"))
        unset = [k for k in RENDER_ENV if k not in dict(plan.env)]
        if unset:
            setting = ", ".join(f"{k}: {RENDER_ENV[k]}" for k in unset)
            out.append(Missing(("install", "env"), f"offscreen rendering with MuJoCo needs {setting} in install.env"))

    if spec.policy.type == "lerobot":
        need(POLICY_DISTRIBUTIONS["lerobot"], "policy.type lerobot",
             "add install.extras: [lerobot] (and install.python: \"3.12\")")
    elif spec.policy.type == "scripted":
        need(POLICY_DISTRIBUTIONS["scripted"], "policy.type scripted", "add install.extras: [metaworld]")
    elif spec.policy.type == "python" and spec.ci.enabled and not plan.code and not plan.pip:
        out.append(Missing(("policy", "path"), f"{spec.policy.path!r} is your code, but an image gets only what the "
                           "install section declares: add its package directory to install.code (or its pinned "
                           "distribution to install.pip), or set ci.enabled: false"))
    return out


def _gym_family(env_id: str) -> str | None:
    """The gymnasium.envs.<family> module an id's entry point lives in (None: not one of Gymnasium's own)."""
    if ":" in env_id:
        return None
    from gymnasium.envs.registration import registry

    entry = registry.get(env_id)
    point = str(getattr(entry, "entry_point", "") or "")
    parts = point.split(":")[0].split(".")
    return ".".join(parts[:3]) if parts[:2] == ["gymnasium", "envs"] and len(parts) >= 3 else None


def problems(spec: Spec, overrides: Sequence[str] = ()) -> list[Problem]:
    """`missing()` as spec problems, each at the position of the key to change (`file:line:col`)."""
    found = missing(spec)
    if not found:
        return []
    from runner.spec import resolve

    doc = resolve(spec.source, overrides) if spec.source is not None else None
    out = []
    for item in found:
        pos = doc.key_pos(item.path) if doc is not None else None
        out.append(Problem(pos or _unknown(spec), dotted(item.path), item.message))
    return out


def _unknown(spec: Spec):  # noqa: ANN202
    from runner.spec.problems import Pos

    return Pos(str(spec.source or spec.name))


__all__ = ["EGL_APT", "Missing", "distributions", "missing", "problems", "renders"]
