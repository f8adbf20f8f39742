"""`runner check`: run a benchmark's canaries and compare them with its committed reference."""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.cli.common import HelpFormatter, add_set_option, say

DESCRIPTION = """\
Is this benchmark still the benchmark it was? Runs its canaries -- a fixed action sequence and a few episodes of
the family's reference policy (Meta-World: the scripted experts; else the seeded random policy), plus the spec's
own policy when it runs here, from the spec's first 3 tasks and 2 seeds -- and compares them with the reference
committed in references/<name>.json (beside specs/). Seconds to a minute on a CPU.

Exit 0 when behaviour is bit-identical or within tolerance (a fingerprint part that changed, e.g. a package's
patch release, is named as a warning); exit 5 when it diverged, with what changed: the fingerprint parts, the
episodes, the first checkpoint where states differ, success counts with an exact paired test. A deliberate change
is accepted by recording the reference again (--record) and committing it: the review shows the diff.
docs/trust.md explains the tolerance and what the fingerprint covers.

examples:
  runner check specs/metaworld.yaml
  runner check specs/metaworld.yaml --record          # write references/metaworld.json
  runner check specs/pusht.yaml --summary "$GITHUB_STEP_SUMMARY"
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("check", help="compare a benchmark's canaries with its reference (drift check)",
                            description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("spec", metavar="SPEC")
    parser.add_argument("--record", action="store_true", help="run the canaries and write the reference")
    parser.add_argument("--reference", type=Path, metavar="FILE",
                        help="the reference file (default: references/<name>.json beside specs/)")
    parser.add_argument("--summary", type=Path, metavar="FILE",
                        help="append the result as markdown (for $GITHUB_STEP_SUMMARY)")
    add_set_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runner.engine import canary
    from runner.errors import BehaviourDiverged
    from runner.spec import load_spec

    spec = load_spec(args.spec, args.overrides)
    path = args.reference or canary.reference_path(spec)
    if args.summary is not None:
        _append(args.summary, "")  # a path that cannot take the report fails now, not after the canaries ran
    if args.record:
        data = canary.record(spec, say)
        canary.write_reference(path, data)
        episodes = len(data["actions"]["episodes"]) + sum(len(p["episodes"]) for p in data["policies"].values())
        say(f"wrote {path}: {episodes} canary episodes; commit it (a later `runner check` compares with it)")
        return 0
    reference = canary.load_reference(path)
    outcome = canary.check(spec, reference, path, say)
    for line in outcome.lines():
        say(line)
    if args.summary is not None:
        _append(args.summary, outcome.markdown())
    if outcome.verdict == canary.DIVERGED:
        changed = f"; fingerprint parts changed: {', '.join(c.split(':')[0] for c in outcome.fingerprint_changes)}" \
            if outcome.fingerprint_changes else "; no fingerprint part changed"
        raise BehaviourDiverged(f"{spec.name}: behaviour diverged from {path}{changed} (details above). If the change "
                                f"is deliberate, record the reference again: runner check {args.spec} --record")
    if outcome.fingerprint_changes:
        say(f"warning: behaviour is {outcome.verdict}, but the fingerprint changed (see above)")
    say(f"{spec.name}: check passed ({outcome.verdict})")
    return 0


def _append(path: Path, text: str) -> None:
    from runner.errors import OutputError

    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise OutputError(f"--summary {path}: cannot write: {exc.strerror or exc}") from None
