"""`runner doctor`: can this machine run the spec? A checklist, each failing line with its fix.

The checks, in order; a check whose ground is missing is skipped, so only the causes are reported:

  python     this interpreter against the spec's install.python (a note, never a failure)
  packages   the distributions the spec's install plan brings (extras, pins) are installed, at the pinned version
  simulator  the env adapter's own check (its packages import)
  tasks      the tasks the spec names exist (e.g. the Gym id is registered)
  assets     the adapter's preflight (e.g. LIBERO's assets)
  policy     the policy's preflight (installed, hub id or policy server reachable within seconds), then it loads
  rendering  offscreen OpenGL works, when the run renders (one frame in a throwaway process)
  episode    one env built, reset, the policy asked for one action, one step (and one video frame)

`runner run` runs the cheap part itself (simulator, policy preflight, assets, rendering) before it writes
anything, and stops at the first failure with the same message.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from runner.errors import ConfigError, PolicyUnavailable, RunnerError
from runner.install.needs import distributions
from runner.install.plan import InstallPlan, python_tuple
from runner.spec import Spec
from runner.text import visible

OK, FAIL, NOTE, SKIP = "ok", "FAIL", "note", "skip"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status == FAIL


def run_checks(spec: Spec, *, episode: bool = True) -> Iterator[Check]:
    """Every check, in order (see the module docstring); stops early only where later checks have no ground."""
    from runner.engine.evaluation import apply_environment

    apply_environment(spec)
    plan = InstallPlan.of(spec)
    install = f"runner install {spec.source or spec.name}"
    yield _python(plan)
    absent: list[str] = []
    yield _packages(plan, install, absent)
    env_needs, policy_needs = distributions(spec)

    from runner.envs import get_adapter

    adapter = None
    if _lacking(env_needs, absent):
        yield Check("simulator", SKIP, f"needs {', '.join(_lacking(env_needs, absent))} (packages)")
    else:
        simulator = _attempt("simulator", lambda: get_adapter(spec.env.type).check() or f"{spec.env.type} imports",
                             install)
        yield simulator
        if not simulator.failed:
            adapter = get_adapter(spec.env.type)
    tasks: list[Any] = []
    if adapter is None:
        yield Check("tasks", SKIP, "needs the simulator")
    else:
        def list_tasks() -> str:
            tasks.extend(adapter.tasks(spec.env))
            names = ", ".join(t.name for t in tasks[:3]) + (" ..." if len(tasks) > 3 else "")
            return f"{len(tasks)} task(s): {visible(names, 90)}"
        yield _attempt("tasks", list_tasks, "check env.task (`runner list` shows the tasks)")
    preflight = getattr(adapter, "preflight", None)
    if adapter is None or not tasks:
        yield Check("assets", SKIP, "needs the tasks")
    elif preflight is None:
        yield Check("assets", OK, f"{spec.env.type} needs no data of its own")
    else:
        assets = _attempt("assets", lambda: preflight(spec.env) or "present",
                          f"runner prepare {spec.source or spec.name}")
        yield assets
        if assets.failed:
            tasks.clear()

    from runner.policies import make_policy, preflight_policy

    policy = None
    served: dict[str, Any] = {}  # what a policy server says it serves

    def preflight_and_describe() -> str:
        served.update(preflight_policy(spec.policy))
        return _describe_policy(spec, served)

    if _lacking(policy_needs, absent):
        loaded = Check("policy", SKIP, f"needs {', '.join(_lacking(policy_needs, absent))} (packages)")
    else:
        loaded = _attempt("policy", preflight_and_describe, _policy_fix(install))
    if loaded.status == OK:
        holder: list[Any] = []
        loaded = _attempt("policy", lambda: holder.append(make_policy(spec.policy, spec.env))
                          or _describe_policy(spec, served), "check policy.path and policy.kwargs")
        policy = holder[0] if holder else None
    yield loaded
    try:
        keys = None if policy is None or policy.observation_keys is None else frozenset(policy.observation_keys)
        needs_gl = getattr(adapter, "needs_gl", None)
        rendering = Check("rendering", OK, "this run renders nothing")
        if adapter is None:
            rendering = Check("rendering", SKIP, "needs the simulator")
        elif needs_gl is not None and needs_gl(spec.env, keys, spec.eval.videos > 0):
            from runner.envs.gl import FIX, gl_renderer, is_software, probe_offscreen_gl

            problem = probe_offscreen_gl()
            if problem:
                rendering = Check("rendering", FAIL, problem, FIX)
            else:
                name = gl_renderer()
                kind = "software rendering on the CPU" if is_software(name) else "hardware rendering"
                rendering = Check("rendering", OK, f"offscreen OpenGL works: {name} ({kind})")
        yield rendering
        if not episode:
            return
        if not tasks or policy is None or rendering.failed:
            yield Check("episode", SKIP, "needs the tasks, their assets, the policy and rendering")
        else:
            yield _attempt("episode", lambda: _one_step(spec, adapter, tasks[0], policy, keys),
                           lambda exc: "correct the spec: the message names what" if isinstance(exc, ConfigError)
                           else "the message is the simulator's or the policy's own")
    finally:
        if policy is not None:
            try:
                policy.close()
            except Exception:  # the policy's clean-up never hides the report
                pass


def _python(plan: InstallPlan) -> Check:
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if python_tuple(here) == python_tuple(plan.python):
        return Check("python", OK, f"{here}, as install.python")
    return Check("python", NOTE, f"{here} here; install.python (the image's) is {plan.python}",
                 f"runner install creates a {plan.python} venv")


def _lacking(names: tuple[str, ...], absent: list[str]) -> list[str]:
    return [n for n in names if canonicalize_name(n) in absent]


def _packages(plan: InstallPlan, install: str, absent: list[str]) -> Check:
    """The plan's requirements installed at their versions; `absent` gets the canonical names not installed."""
    missing, other = [], []
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for text in (*(r for name in plan.extras for r in _extra(name)), *plan.pip):
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate():
            if requirement.marker.evaluate({"python_version": plan.python, "python_full_version": plan.python + ".0"}):
                if canonicalize_name(requirement.name) not in absent:
                    missing.append(f"{requirement.name} (on Python {plan.python}, not {here})")
                    absent.append(canonicalize_name(requirement.name))
            continue
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            if canonicalize_name(requirement.name) not in absent:
                missing.append(str(requirement.name))
                absent.append(canonicalize_name(requirement.name))
            continue
        if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            other.append(f"{canonicalize_name(requirement.name)} {version} (the spec wants {requirement.specifier})")
    if missing:
        return Check("packages", FAIL, f"not installed: {', '.join(missing)}", install)
    if other:
        return Check("packages", FAIL, f"other versions than the spec's: {'; '.join(other)} (results are comparable "
                     "only on the same versions)", install)
    return Check("packages", OK, f"the spec's extras ({', '.join(plan.extras) or 'none'}) and pins are installed")


def _extra(name: str) -> tuple[str, ...]:
    from runner.spec.project import extras

    return extras().get(name, ())


def _attempt(name: str, call: Callable[[], Any], fix: str | Callable[[BaseException], str]) -> Check:
    """The check `call` makes; `fix`: the fix to show when it fails (or a function of the failure)."""
    try:
        detail = call()
    except Exception as exc:  # a check reports; it never raises
        text = str(exc) if isinstance(exc, RunnerError) else f"{type(exc).__name__}: {exc}"
        return Check(name, FAIL, text, fix(exc) if callable(fix) else fix)
    return Check(name, OK, str(detail))


def _policy_fix(install: str) -> Callable[[BaseException], str]:
    """A policy that cannot be loaded or reached: install it, start its server, or correct the spec."""
    def fix(exc: BaseException) -> str:
        if isinstance(exc, PolicyUnavailable):
            return "start the policy server (e.g. runner serve SPEC on that machine) or correct policy.url"
        if isinstance(exc, ConfigError):
            return "correct the spec, or the environment variable the message names"
        return install

    return fix


def _describe_policy(spec: Spec, served: dict[str, Any] | None = None) -> str:
    """The policy, and what its server (a remote policy's) says it serves."""
    text = f"{spec.policy.type}" + (f" {spec.policy.path}" if spec.policy.path else "")
    text += f" at {spec.policy.url}" if spec.policy.url else ""
    parts = [str(served[k]) for k in ("server", "server_type", "server_path") if served and k in served]
    return text + (f" (serving: {' '.join(parts)})" if parts else "")


def _one_step(spec: Spec, adapter: Any, task: Any, policy: Any, keys: frozenset[str] | None) -> str:
    """Build one env, reset it, ask the policy for one action (checked as in a run), step, render a frame."""
    from runner.engine.actions import ActionSpec, check_batch
    from runner.policies.base import EpisodeStart, stack_observations

    start = time.perf_counter()
    videos = spec.eval.videos > 0
    env = adapter.make(task, spec.env, obs_keys=keys, video=videos)
    try:
        observation, _ = env.reset(seed=spec.eval.seed, options={"episode_index": 0})
        space = env.action_space
        policy.reset([EpisodeStart(0, task, 0, spec.eval.seed, space, 1)])
        actions = policy.select_action(stack_observations([observation]), [task.text], [0])
        action = check_batch(actions, [ActionSpec(space)], lambda i: f"{task.key} episode 0")[0]
        env.step(action)
        if videos:
            env.render()
    finally:
        env.close()
    return f"{task.name}: reset, one action, one step{' and one video frame' if videos else ''} in " \
           f"{time.perf_counter() - start:.1f} s"


__all__ = ["Check", "FAIL", "NOTE", "OK", "SKIP", "run_checks"]
