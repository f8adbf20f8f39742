"""The real linters on every generated file, with zero findings; a missing linter fails, never skips.

actionlint (with shellcheck for `run:` blocks), zizmor --offline, hadolint at threshold `warning` (and
no findings at any level), check-jsonschema's GitHub-workflow schema. Each linter also gets a bad
file, to prove it runs and reports (for actionlint: that shellcheck really ran).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_generate import GOLDEN_CASES, PENDULUM_SPEC, REPO, copy_project, gen_ci, render_case, write_tree

BIN = Path(sys.executable).parent
LINTERS = ("actionlint", "shellcheck", "zizmor", "hadolint", "check-jsonschema")


def tool(name: str) -> str:
    path = BIN / name
    found = str(path) if path.is_file() else shutil.which(name)
    if not found:
        pytest.fail(f"linter {name!r} is not installed (pip install -e '.[dev]' provides it)")
    return found


def lint_env() -> dict[str, str]:
    """PATH with the venv's bin first, so actionlint finds this shellcheck."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "NO_COLOR": "1"}


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=lint_env(), timeout=300)


# Each linter: (applies to file?, run it -> list of findings as strings; [] when clean).
def actionlint(path: Path) -> list[str]:
    proc = run([tool("actionlint"), "-shellcheck", tool("shellcheck"), "-format", "{{json .}}", str(path)], path.parent)
    findings = json.loads(proc.stdout or "[]")
    assert proc.returncode == (1 if findings else 0), proc.stderr
    return [f"{f['filepath']}:{f['line']}: {f['message']} [{f['kind']}]" for f in findings]


def zizmor(path: Path) -> list[str]:
    proc = run([tool("zizmor"), "--offline", "--format", "json", "--no-progress", str(path)], path.parent)
    assert proc.returncode in (0, 11, 12, 13, 14), proc.stderr  # 0 clean; 11-14 findings by severity
    findings = json.loads(proc.stdout)
    assert (proc.returncode == 0) == (findings == []), proc.stdout
    return [f"{f['ident']}: {f['desc']}" for f in findings]


def hadolint(path: Path) -> list[str]:
    proc = run([tool("hadolint"), "--failure-threshold", "warning", "--format", "json", str(path)], path.parent)
    findings = json.loads(proc.stdout or "[]")
    assert proc.returncode in (0, 1), proc.stderr
    if any(f["level"] in ("error", "warning") for f in findings):
        assert proc.returncode == 1
    return [f"{f['file']}:{f['line']}: {f['code']} {f['level']}: {f['message']}" for f in findings]


def workflow_schema(path: Path) -> list[str]:
    proc = run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)], path.parent)
    assert proc.returncode in (0, 1), proc.stderr
    return [] if proc.returncode == 0 else [proc.stdout + proc.stderr]


WORKFLOW_LINTERS: dict[str, Callable[[Path], list[str]]] = {
    "actionlint": actionlint, "zizmor": zizmor, "check-jsonschema": workflow_schema,
}
DOCKERFILE_LINTERS: dict[str, Callable[[Path], list[str]]] = {"hadolint": hadolint}


def test_linters_are_installed() -> None:
    for name in LINTERS:
        assert Path(tool(name)).is_file()


# ---------------------------------------------------------------- the trees to lint

def committed_tree(tmp: Path) -> Path:
    return REPO


def golden_tree(case: str) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        write_tree(render_case(case), tmp)
        return tmp
    return make


def new_benchmark_tree(tmp: Path) -> Path:
    """A copy of the project plus specs/pendulum.yaml, regenerated with `runner gen-ci` and nothing else."""
    copy = copy_project(tmp / "project")
    (copy / "specs" / "pendulum.yaml").write_text(PENDULUM_SPEC)
    from runner.cli.main import main

    assert main(["gen-ci", "--root", str(copy)]) == 0
    assert (copy / "docker" / "Dockerfile.benchmark.pendulum").is_file()
    return copy


TREES: dict[str, Callable[[Path], Path]] = {
    "committed": committed_tree,
    "new-benchmark": new_benchmark_tree,
    **{f"golden-{case}": golden_tree(case) for case in GOLDEN_CASES},
}


def generated_files(root: Path) -> tuple[list[Path], list[Path]]:
    workflows = sorted((root / ".github" / "workflows").glob("*.yml"))
    dockerfiles = sorted((root / "docker").glob("Dockerfile.benchmark.*"))
    assert workflows and dockerfiles, root
    return workflows, dockerfiles


@pytest.mark.parametrize("linter", sorted(WORKFLOW_LINTERS) + sorted(DOCKERFILE_LINTERS))
@pytest.mark.parametrize("tree", sorted(TREES))
def test_generated_files_lint_clean(tree: str, linter: str, tmp_path: Path) -> None:
    root = TREES[tree](tmp_path)
    workflows, dockerfiles = generated_files(root)
    if linter in WORKFLOW_LINTERS:
        paths, check = workflows, WORKFLOW_LINTERS[linter]
    else:
        paths, check = dockerfiles, DOCKERFILE_LINTERS[linter]
    findings = [finding for path in paths for finding in check(path)]
    assert findings == [], "\n".join(findings)


def test_project_ci_workflow_is_in_the_committed_tree() -> None:
    workflows, _ = generated_files(REPO)
    assert REPO / ".github/workflows/ci.yml" in workflows


def test_pre_commit_files_are_clean_for_zizmor() -> None:
    for name in (".pre-commit-config.yaml", ".pre-commit-hooks.yaml"):
        assert zizmor(REPO / name) == []


# ---------------------------------------------------------------- each linter reports a bad file

BAD_WORKFLOW = """\
name: bad
on: issues
permissions: {}
jobs:
  bad:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.issue.title }}"
"""


def write(tmp_path: Path, rel: str, text: str) -> Path:
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_actionlint_runs_shellcheck_on_run_blocks(tmp_path: Path) -> None:
    good = BAD_WORKFLOW.replace('echo "${{ github.event.issue.title }}"', "echo $HOME").replace("@v4", "@v5")
    findings = actionlint(write(tmp_path, ".github/workflows/sc.yml", good))
    assert any("SC2086" in f and "[shellcheck]" in f for f in findings), findings


def test_zizmor_reports_injection_and_unpinned_actions(tmp_path: Path) -> None:
    idents = {f.split(":")[0] for f in zizmor(write(tmp_path, ".github/workflows/bad.yml", BAD_WORKFLOW))}
    assert {"template-injection", "unpinned-uses"} <= idents, idents


def test_hadolint_reports_at_warning_level(tmp_path: Path) -> None:
    bad = "FROM ubuntu:24.04\nRUN apt-get update && apt-get install -y curl\n"
    findings = hadolint(write(tmp_path, "docker/Dockerfile.benchmark.bad", bad))
    assert any("DL3008 warning" in f for f in findings), findings


def test_workflow_schema_rejects_a_bad_key(tmp_path: Path) -> None:
    bad = BAD_WORKFLOW.replace("    runs-on: ubuntu-latest\n", "    runs_on: ubuntu-latest\n")
    assert workflow_schema(write(tmp_path, ".github/workflows/schema.yml", bad))


def test_linters_see_an_injection_the_generator_would_have_made(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Sanity check of the whole chain: a hand-made unsafe variant of a generated step is caught."""
    copy = new_benchmark_tree(tmp_path)
    workflow = copy / ".github" / "workflows" / "benchmark_pendulum.yml"
    text = workflow.read_text()
    unsafe = text.replace("runner run specs/pendulum.yaml \\\n", 'runner run "${{ github.head_ref }}" \\\n', 1)
    assert unsafe != text
    workflow.write_text(unsafe)
    assert any(f.startswith("template-injection") for f in zizmor(workflow))
    assert gen_ci(capsys, "--check", "--root", str(copy))[0] == 1
