"""`runner new`: write a minimal spec for a family and task, with the install section `validate` wants."""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.cli.common import HelpFormatter, say

DESCRIPTION = """\
Write a new benchmark spec: the env family and task you name, a policy that needs nothing from the hub
(Meta-World's scripted experts where they exist, else random actions), CPU only, and the install section
`runner validate` wants for them (extras, pins, Mesa's EGL for MuJoCo rendering), with a comment per
section. The spec is validated before it is written; nothing is overwritten without --force.
Copying a shipped spec instead inherits specs/_gpu_hub.yaml (a GPU runner, a CUDA image, the hub token):
`runner show SPEC --origins` shows what comes from where.

examples:
  runner new reach --env metaworld --task reach-v3          # writes specs/reach.yaml
  runner new lander --env gym --task LunarLander-v3 --videos 1
  runner new cartpole --env gym --task CartPole-v1 --policy python --path my_policies:make --code my_policies
  runner new spatial --env libero --task libero_spatial      # then: runner install specs/spatial.yaml
"""

NAME_PATTERN = r"^[a-z][a-z0-9_]{0,39}$"
OPTIONS = {"env.type": "--env", "env.task": "--task", "policy.type": "--policy", "policy.path": "--path",
           "eval.videos": "--videos", "install": "--pip", "install.pip": "--pip", "install.code": "--code"}
# (spec key -> the option that sets it)


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("new", help="write a new spec", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("name", metavar="NAME", help="the benchmark's name (lower-case letters, digits, _)")
    parser.add_argument("--env", required=True, metavar="TYPE", help="the env family (`runner list` shows them)")
    parser.add_argument("--task", required=True, help="its task, group, suite or Gym id (a comma list for several)")
    parser.add_argument("--policy", default=None, metavar="TYPE",
                        help="policy.type (default: scripted where the family has experts, else random)")
    parser.add_argument("--path", default=None, help="policy.path (a python policy's module:function, a LeRobot "
                        "checkpoint's hub id or directory)")
    parser.add_argument("--videos", type=int, default=0, metavar="N", help="videos of the first N episodes per task")
    parser.add_argument("--pip", action="append", default=[], metavar="NAME==VERSION",
                        help="a pinned requirement to add to install.pip (repeatable), e.g. a renderer's version")
    parser.add_argument("--code", action="append", default=[], metavar="DIR",
                        help="a package directory of your own code (a python policy's) for install.code, relative to "
                             "the spec (repeatable)")
    parser.add_argument("-o", "--output", type=Path, default=None, metavar="PATH",
                        help="where to write it (default: specs/NAME.yaml, or NAME.yaml without a specs/ here)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import re

    from runner.errors import ConfigError

    if not re.fullmatch(NAME_PATTERN, args.name):
        raise ConfigError(f"{args.name!r} is not a spec name: lower-case letters, digits and _, starting with a "
                          "letter, at most 40 characters")
    if args.videos < 0:
        raise ConfigError(f"--videos must be 0 or more, not {args.videos}")
    out = args.output or (Path("specs") if Path("specs").is_dir() else Path(".")) / f"{args.name}.yaml"
    if out.suffix not in (".yaml", ".yml") or out.stem != args.name:
        raise ConfigError(f"{str(out)!r}: a spec's file is named after it: {args.name}.yaml")
    if out.exists() and not args.force:
        raise ConfigError(f"{out} exists; pass --force to overwrite it")
    if out.parent.exists() and not out.parent.is_dir():
        raise ConfigError(f"{str(out.parent)!r} is not a directory")
    text = compose(args.name, args.env, args.task, args.policy, args.videos, out, tuple(args.pip), args.path,
                   tuple(args.code))
    out.parent.mkdir(parents=True, exist_ok=True)  # only once the spec is known to be valid
    from runner.atomic import write_text_atomic

    write_text_atomic(out, text)
    say(f"wrote {out}; next: runner doctor {out} (what this machine lacks for it; runner install {out} puts it in "
        f"a venv of its own), then runner run {out} (once it runs, runner check {out} --record writes the reference "
        "its CI's drift check compares with)")
    return 0


def compose(name: str, env_type: str, task: str, policy: str | None, videos: int, out: Path,
            pins: tuple[str, ...] = (), policy_path: str | None = None, code: tuple[str, ...] = ()) -> str:
    """The spec's text, checked the way `runner validate` checks it (SpecError, at `out`, otherwise)."""
    import os
    import tempfile

    from runner.adapters import policy_type
    from runner.distributions import alternatives
    from runner.errors import ConfigError
    from runner.install.needs import install_for, problems
    from runner.results.schema import schema_path
    from runner.spec import Pos, Problem, Spec, SpecError, load_spec

    if policy is None:
        policy = "scripted" if env_type in (policy_type("scripted").envs or ()) else "random"
    body = {"env": {"type": env_type, "task": task},
            "policy": {"type": policy, **({"path": policy_path} if policy_path else {})},
            "eval": {"n_episodes": 10, "seed": 1000, "videos": videos}}

    def at_options(found: list[Problem]) -> SpecError:
        """The problems, each at the option that set the value (else at `out`, the file to be written)."""
        def where(problem: Problem) -> Pos:
            key = problem.path.partition("[")[0]
            return Pos(f"runner new {OPTIONS[key]}") if key in OPTIONS else Pos(str(out), problem.pos.line,
                                                                                 problem.pos.col)

        return SpecError([Problem(where(p), p.path, p.message, p.hint) for p in found])

    def load(text: str, *, complete: bool) -> Spec:
        """The spec of `text`, checked as `validate` checks it (`complete`: its install section too), in the
        directory it is written to (install.code is relative to it: linked into the scratch directory)."""
        with tempfile.TemporaryDirectory() as tmp:
            for top in dict.fromkeys(Path(c).parts[0] for c in code if Path(c).parts):
                if (out.parent / top).exists():
                    (Path(tmp) / top).symlink_to((out.parent / top).resolve())
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(text, encoding="utf-8")
            try:
                spec = load_spec(path)
                found = problems(spec) if complete else []
            except SpecError as exc:
                raise at_options(exc.problems) from None
            if found:
                raise at_options(found)
            return spec

    install, by_hand = install_for(load(render(name, {}, body, "", ""), complete=False))
    given = {alternative for p in pins for alternative in alternatives(p.partition("==")[0].partition("[")[0])}
    unpinned = [p for p in by_hand if not alternatives(p.partition("==")[0]) & given]
    if unpinned:
        what = ", ".join(f"{p.partition('==')[0]} ({p.partition('(V: ')[2].rstrip(')') or 'any version'})"
                         for p in unpinned)
        raise ConfigError(f"the spec needs {what}, which is not installed here, so runner cannot pick its version: "
                          "name it with --pip NAME==VERSION" + (" (or --videos 0: nothing renders)" if videos else ""))
    if pins:
        install["pip"] = list(dict.fromkeys([*install.get("pip", []), *pins]))  # type: ignore[list-item]
    if code:
        install["code"] = list(code)
    schema_file = schema_path("benchmark.schema.json")
    # the editor's schema: relative inside a checkout of runner (as the shipped specs), else the installed copy
    inside = out.resolve().is_relative_to(schema_file.parent.parent)
    schema = os.path.relpath(schema_file, out.resolve().parent) if inside else str(schema_file)
    text = render(name, install, body, schema, out.as_posix())
    load(text, complete=True)
    return text


def _flow(value: object) -> str:
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, width=1000, sort_keys=False).strip()


def render(name: str, install: dict, body: dict, schema: str, path: str) -> str:
    """The spec as YAML with a comment per section; `path`: where it is written, as the user named it."""
    lines = [f"# yaml-language-server: $schema={schema}", "# Written by `runner new`; `runner validate` checks it,",
             f"# `runner show {path} --origins` prints it with every default filled in.",
             f"name: {name}", f"description: {body['policy']['type']} policy on {body['env']['task']} "
             f"({body['env']['type']}), CPU only.", "",
             "# What the Docker image and `runner install` put in place: what this env and policy need. CPU only:",
             "# a GPU runner, a CUDA image and the hub token are what the shipped specs/_gpu_hub.yaml adds.",
             "install:"]
    if not install:
        lines[-1] = "install: {}  # nothing beyond runner itself"
    for key, value in install.items():
        lines.append(f"  {key}: {_flow(value)}")
    lines += ["", "# The benchmark: the family (`runner list` shows each one's tasks) and its task(s).",
              f"env: {_flow(body['env'])}",
              *(["# Success: the env's info['is_success'] / info['success']; an env that reports neither (CartPole) "
                 "needs a rule,", "# e.g. env: {..., success: {survive: true}} or {min_return: 195}."]
                if body["env"]["type"] == "gym" else []), "",
              "# The policy: scripted | random | python (path: module:function) | lerobot (path: a hub id or a",
              "# directory) | remote (url: a policy server).",
              f"policy: {_flow(body['policy'])}", "",
              "# Episodes per task and their seeds (episode k: seed + k); videos of the first N episodes of each task.",
              f"eval: {_flow(body['eval'])}", "",
              "# CI (`runner gen-ci`): a workflow on a CPU runner that runs this spec with these overrides.",
              "ci:", "  set: {eval.n_episodes: 1}", ""]
    return "\n".join(lines)


__all__ = ["compose", "render"]
