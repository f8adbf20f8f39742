"""`runner gen-ci`: render the benchmark Dockerfiles and workflow from the specs, or check they are current."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runner.cli.common import HelpFormatter, say
from runner.errors import ConfigError, DriftError

DESCRIPTION = """\
Render, for each spec with ci.enabled, docker/Dockerfile.benchmark.<name> and its own workflow
.github/workflows/benchmark_<name>.yml, using ROOT/templates/. A workflow runs when its benchmark's files
change (its spec, the partials it extends, its generated files, references/<name>.json, ci.paths,
install.code) or shared ones (runner/, schema/, templates/, pyproject.toml): editing one spec runs only its
benchmark. Besides the evaluation, each workflow has a health-check job: `runner check` on the spec in the same image.
Before rendering, every spec is checked like `runner validate` (an image that could not run its spec is
never written).
Generated files carry a `# @generated` header; commit them. Generated files that no spec produces any
more (spec deleted, or ci.enabled: false) are removed, or with --check reported; files without the
header are never touched.

--check writes nothing: it renders in memory, compares byte for byte, prints a unified diff of every
difference and exits 1 when anything is stale (0 when all files are current).

examples:
  runner gen-ci                          # (re)write the files for specs/*.yaml
  runner gen-ci --check                  # CI / pre-commit: fail when the committed files are stale
  runner gen-ci --root path/to/project   # another checkout
  runner gen-ci specs/libero.yaml        # only this spec's files (the other benchmarks' are left alone)
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "gen-ci", help="generate the CI Dockerfiles and workflow from the specs",
        description=DESCRIPTION, formatter_class=HelpFormatter,
    )
    parser.add_argument("specs", nargs="*", metavar="SPEC",
                        help="spec files forming the set (default: ROOT/specs/*.yaml, without _partials)")
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on any difference")
    parser.add_argument("--root", type=Path, default=Path("."), metavar="DIR",
                        help="project root holding specs/, templates/, docker/ and .github/ (default: .)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runner.generate import apply, changes, render
    from runner.spec import SpecError, default_spec_paths, load_specs

    root: Path = args.root
    if not root.is_dir():
        raise ConfigError(f"--root {root}: no such directory")
    paths = [Path(p) for p in args.specs] or default_spec_paths(root)
    if not paths:
        raise ConfigError(f"no specs given and none found in {root / 'specs'}/*.yaml")
    from runner.install.needs import problems as install_problems

    specs = load_specs(paths)
    missing = [p for spec in specs for p in install_problems(spec)]
    if missing:  # the same refusal as `runner validate`: an image that could not run its spec is never written
        raise SpecError(missing)
    files = render(specs, root)
    # Pruning stale files is only safe when the set is the whole of specs/.
    found = changes(root, files, prune=not args.specs)

    if args.check:
        if not found:
            say(f"gen-ci: {len(files)} generated files are up to date")
            return 0
        for change in found:
            sys.stdout.write(change.diff())
        sys.stdout.flush()
        listing = "\n".join(f"  {c.path}: {CHECK_WORDS[c.kind]}" for c in found)
        raise DriftError(f"gen-ci: generated files are stale:\n{listing}\nrun: runner gen-ci")

    apply(root, found)
    for change in found:
        say(f"gen-ci: {WRITE_WORDS[change.kind]} {change.path}")
    say(f"gen-ci: {len(files)} generated files, {len(found)} changed")
    return 0


CHECK_WORDS: dict[str, str] = {
    "create": "missing",
    "update": "differs from what the specs produce",
    "remove": "generated for no current spec (deleted, or ci.enabled: false)",
}
WRITE_WORDS: dict[str, str] = {"create": "wrote", "update": "updated", "remove": "removed"}
