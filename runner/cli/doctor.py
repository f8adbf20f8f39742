"""`runner doctor`: a checklist that this machine can run a spec, each failing line with its fix."""

from __future__ import annotations

import argparse
import sys

from runner.cli.common import HelpFormatter, add_set_option, say

DESCRIPTION = """\
Check that this machine can run the spec, without running the evaluation: the packages of its install
plan (at the pinned versions), then the steps every run takes before it writes anything (simulator, policy:
a hub id or policy server reachable within seconds, assets, tasks, the policy loaded, offscreen rendering
when the run renders), then one env reset + one policy action + one step. Each line is ok, FAIL (with its
fix), note or skip (its ground failed: only causes are reported). Exit 0 when nothing fails, 3 otherwise.

`runner run` takes the same steps before it writes anything and stops at the first failure.

examples:
  runner doctor specs/metaworld.yaml --set policy.type=scripted
  runner doctor specs/libero.yaml
  runner doctor specs/libero.yaml --quick         # without the episode step
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("doctor", help="check that this machine can run a spec", description=DESCRIPTION,
                            formatter_class=HelpFormatter)
    parser.add_argument("spec", metavar="SPEC")
    parser.add_argument("--quick", action="store_true", help="skip the one-episode-step check")
    add_set_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runner.engine.doctor import run_checks
    from runner.spec import load_spec

    spec = load_spec(args.spec, args.overrides)
    say(f"runner doctor {args.spec}: Python {sys.version.split()[0]} at {sys.prefix}")
    failed = 0
    for check in run_checks(spec, episode=not args.quick):
        first, *rest = check.detail.splitlines() or [""]
        say(f"  {check.status:<5} {check.name:<10} {first}")
        for line in rest:
            say(f"  {'':<5} {'':<10} {line}")
        if check.failed:
            failed += 1
            if check.fix:
                say(f"  {'':<5} {'':<10} fix: {check.fix}")
    if failed:
        say(f"{failed} check(s) failed")
        return 3
    say("this machine can run the spec")
    return 0
