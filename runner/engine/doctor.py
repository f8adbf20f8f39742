"""`runner doctor`: can this machine run the spec? A checklist, each failing line with its fix.

The checks, in order; a check whose ground is missing is skipped, so only the causes are reported:

  python     this interpreter against the spec's install.python (a note, never a failure)
  packages   what this run imports (its env family's and policy type's distributions) is installed, at the
             install plan's versions; the rest of the install section (e.g. LeRobot from a shared partial when the
             run uses a scripted policy) is a note
  simulator, policy, assets, tasks, load, contract, rendering
             the pre-run steps every run takes (runner.engine.preflight), each reported (contract: the policy's
             declared inputs and action size against what the env gives; the message says which side to change)
  episode    one env built, reset, the policy asked for one action, one step (and one video frame)

`runner run` runs the same pre-run steps before it writes anything, and stops at the first failure with the
same message.
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

from runner.errors import ConfigError, HubUnreachable, PolicyUnavailable, RunnerError
from runner.install.needs import distributions
from runner.install.plan import InstallPlan, python_tuple
from runner.spec import Spec

OK, FAIL, NOTE, SKIP = "ok", "FAIL", "note", "skip"
# The pre-run steps each check builds on (a check whose ground failed is skipped).
GROUND = {"simulator": (), "policy": (), "assets": ("simulator",), "tasks": ("simulator",), "load": ("policy",),
          "contract": ("load",), "rendering": ("simulator",),
          "episode": ("tasks", "assets", "load", "contract", "rendering")}


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
    from runner.engine.preflight import Preflight

    preflight = Preflight(spec)
    plan = InstallPlan.of(spec)
    source = spec.source or spec.name
    install = f"runner install {source}"
    yield _python(plan)
    absent: list[str] = []
    env_needs, policy_needs = distributions(spec)
    yield from _packages(plan, install, absent, {*env_needs, *policy_needs})
    fixes: dict[str, str | Callable[[BaseException], str]] = {
        "simulator": install, "policy": _policy_fix(install), "assets": f"runner prepare {source}",
        "tasks": "check env.task (`runner list` shows the tasks)", "load": "check policy.path and policy.kwargs",
        "contract": "",  # the message says which side to change, and how
        "rendering": "",  # the message says how
    }
    lacking = {"simulator": _lacking(env_needs, absent), "policy": _lacking(policy_needs, absent)}
    passed: set[str] = set()
    try:
        for name, step in preflight.steps().items():
            if lacking.get(name):
                yield Check(name, SKIP, f"needs {', '.join(lacking[name])} (packages)")
                continue
            ground = [g for g in GROUND[name] if g not in passed]
            if ground:
                yield Check(name, SKIP, f"needs the {' and the '.join(ground)} check")
                continue
            check = _attempt(name, step, fixes[name])
            if not check.failed:
                passed.add(name)
            yield check
        if not episode:
            return
        ground = [g for g in GROUND["episode"] if g not in passed]
        if ground:
            yield Check("episode", SKIP, f"needs the {', '.join(ground)} check(s)")
        else:
            yield _attempt("episode", lambda: _one_step(spec, preflight),
                           lambda exc: "correct the spec: the message names what" if isinstance(exc, ConfigError)
                           else "the message is the simulator's or the policy's own")
    finally:
        preflight.close()


def _python(plan: InstallPlan) -> Check:
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if python_tuple(here) == python_tuple(plan.python):
        return Check("python", OK, f"{here}, as install.python")
    return Check("python", NOTE, f"{here} here; install.python (the image's) is {plan.python}",
                 f"runner install creates a {plan.python} venv")


def _lacking(names: tuple[str, ...], absent: list[str]) -> list[str]:
    return [n for n in names if canonicalize_name(n) in absent]


def _packages(plan: InstallPlan, install: str, absent: list[str], used: set[str]) -> Iterator[Check]:
    """What this run imports (`used`: distribution names) is installed, at the plan's versions (a failure); the plan's
    other requirements are a note. `absent` gets the canonical names of those not installed."""
    from runner.distributions import alternatives, installed

    wanted = set().union(*(alternatives(n) for n in used)) if used else set()
    missing, other, spare, provided = [], [], [], []
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    judged: set[str] = set()
    for text in (*(r for name in plan.extras for r in _extra(name)), *plan.pip):
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        needed = name in wanted
        judged.add(name)
        if requirement.marker is not None and not requirement.marker.evaluate():
            if requirement.marker.evaluate({"python_version": plan.python, "python_full_version": plan.python + ".0"}):
                if name not in absent:
                    (missing if needed else spare).append(f"{requirement.name} (on Python {plan.python}, not {here})")
                    absent.append(name)
            continue
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            provider = next((a for a in sorted(alternatives(name)) if a != name and installed(a)), None)
            if provider is not None:  # pygame for pygame-ce: the same module, so the run works (a note)
                provided.append(f"{requirement.name} by {provider} {metadata.version(provider)}")
                continue
            if name not in absent:
                (missing if needed else spare).append(str(requirement.name))
                absent.append(name)
            continue
        if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            text = f"{name} {version} (the spec wants {requirement.specifier})"
            (other if needed else spare).append(text)
    for name in sorted(used, key=canonicalize_name):  # what the run imports but the install section does not list
        if not alternatives(name) & judged and not installed(name):
            missing.append(name)
            absent.append(canonicalize_name(name))
    if missing:
        yield Check("packages", FAIL, f"this run needs, not installed: {', '.join(missing)}", install)
    elif other:
        yield Check("packages", FAIL, f"other versions than the spec's: {'; '.join(other)} (results are comparable "
                    "only on the same versions)", install)
    else:
        yield Check("packages", OK, f"what this run imports is installed ({', '.join(sorted(used)) or 'runner only'})")
    if provided:
        yield Check("packages", NOTE, f"provided by a distribution of the same package here: {', '.join(provided)} "
                    "(the image installs the listed one)")
    if spare:
        yield Check("packages", NOTE, f"the install section also lists {', '.join(spare)}: not installed here (or "
                    "other versions), not needed by this run (the image has them)")


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
        if isinstance(exc, HubUnreachable):  # packages are not the problem: the hub is out of reach from here
            return "the hub is out of reach: download the checkpoint where it is reachable and pass its directory " \
                   "(--set policy.path=DIR), or set HF_HUB_OFFLINE=0 / HF_ENDPOINT if the probe is wrong"
        if isinstance(exc, ConfigError):
            return "correct the spec, or the environment variable the message names"
        return install

    return fix


def _one_step(spec: Spec, preflight: Any) -> str:
    """Build one env, reset it, ask the policy for one action (checked as in a run), step, render a frame."""
    from runner.engine.actions import ActionSpec, check_batch
    from runner.engine.preflight import observation_keys
    from runner.policies.base import EpisodeStart, stack_observations

    start = time.perf_counter()
    videos = spec.eval.videos > 0
    task, policy = preflight.tasks[0], preflight.policy
    env = preflight.adapter.make(task, spec.env, obs_keys=observation_keys(policy), video=videos)
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


__all__ = ["FAIL", "NOTE", "OK", "SKIP", "Check", "run_checks"]
