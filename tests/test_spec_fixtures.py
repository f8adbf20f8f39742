"""Every bad spec under tests/fixtures/specs/bad/ fails `runner validate` with exactly its golden message.

`bad/NAME.expected` holds the whole stderr of `runner validate tests/fixtures/specs/bad/NAME.yaml` run
from the repository root. After an intended message change, rewrite the goldens with
`.venv/bin/python -m pytest tests/test_spec_fixtures.py --update-goldens` and review `git diff`.
Files starting with `_` are partials (targets of `extends`), not fixtures, as in specs/.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from helpers import REPO, installed_runner, runner_cli

from runner.cli.main import main
from runner.spec import default_spec_paths
from runner.spec.yamlload import MAX_BYTES

FIXTURES = REPO / "tests" / "fixtures" / "specs"
BAD = sorted(p for p in (FIXTURES / "bad").glob("*.yaml") if not p.name.startswith("_"))
GOOD = sorted(p for p in (FIXTURES / "good").glob("*.yaml") if not p.name.startswith("_"))
COMMITTED = default_spec_paths(REPO)

# `path:line:col: dotted.key: message` (key optional) or `path: message` for whole-file problems.
LINE = re.compile(r"^(?P<file>[^\s:]+\.yaml|--set \S+?)(:(?P<line>\d+):(?P<col>\d+))?: (?P<rest>\S.*)$")


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return runner_cli(*args, command=installed_runner(), timeout=60)


def golden_of(path: Path) -> Path:
    return path.with_suffix(".expected")


def test_enough_bad_fixtures() -> None:
    assert len(BAD) >= 30


def test_no_golden_without_fixture(update_goldens: bool) -> None:
    """A golden whose fixture is gone is stale (--update-goldens deletes it; missing goldens fail below)."""
    orphans = sorted(p for p in (FIXTURES / "bad").glob("*.expected") if not p.with_suffix(".yaml").is_file())
    if update_goldens:
        for orphan in orphans:
            orphan.unlink()
    else:
        assert orphans == []


def test_every_partial_is_used() -> None:
    texts = "".join(p.read_text(encoding="utf-8", errors="replace") for p in (FIXTURES / "bad").glob("*.yaml"))
    for partial in (FIXTURES / "bad").glob("_*.yaml"):
        assert f"extends: {partial.name}" in texts, f"{partial.name} is not extended by any fixture"


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_fixture(path: Path, in_repo: None, capsys: pytest.CaptureFixture[str], update_goldens: bool) -> None:
    code = main(["validate", rel(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert code == 2
    assert out == ""
    golden = golden_of(path)
    if update_goldens:
        golden.write_text(err, encoding="utf-8")
    assert err == golden.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_fixture_message_format(path: Path) -> None:
    """Each golden line names a fixture file (or its partial) with line and column, then a message."""
    lines = golden_of(path).read_text(encoding="utf-8").splitlines()
    assert lines
    for line in lines:
        match = LINE.match(line)
        assert match, line
        assert match["file"].startswith("tests/fixtures/specs/bad/"), line
        assert match["line"] and int(match["line"]) >= 1 and int(match["col"]) >= 1, line


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_problems_sorted_by_file_line_col(path: Path) -> None:
    keys = []
    for line in golden_of(path).read_text(encoding="utf-8").splitlines():
        match = LINE.match(line)
        keys.append((match["file"], int(match["line"]), int(match["col"])))
    assert keys == sorted(keys)


def test_all_bad_fixtures_at_once_end_to_end() -> None:
    """One real process over every fixture: every file's problems, in argument order, and no traceback."""
    result = run_cli("validate", *map(rel, BAD))
    assert "Traceback" not in result.stdout + result.stderr
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == "".join(golden_of(p).read_text(encoding="utf-8") for p in BAD)


@pytest.mark.parametrize("stem", ["non_utf8", "nul_byte", "alias_bomb", "yaml_tab_indentation", "top_level_list"])
def test_bad_fixture_subprocess(stem: str) -> None:
    path = FIXTURES / "bad" / f"{stem}.yaml"
    result = run_cli("validate", rel(path))
    assert "Traceback" not in result.stdout + result.stderr
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == golden_of(path).read_text(encoding="utf-8")


def test_too_large_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    big = tmp_path / "too_large.yaml"
    big.write_bytes(b"name: too_large\n" + b"# padding\n" * (MAX_BYTES // 10 + 1))
    assert main(["validate", big.name]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == (
        "",
        f"too_large.yaml:1:1: file is larger than {MAX_BYTES} bytes; a spec is a few KiB of YAML\n",
    )


def test_deeply_nested_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nesting deep enough to exhaust the parser's recursion is a problem, not a RecursionError."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep.yaml").write_text("name: deep\nenv: " + "[" * 3000 + "]" * 3000 + "\n")
    assert main(["validate", "deep.yaml"]) == 2
    assert capsys.readouterr().err == "deep.yaml:1:1: YAML nested too deeply (at most 50 levels)\n"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("specs/no_such.yaml", "specs/no_such.yaml: no such file"),
        ("specs", "specs: is a directory; name a spec file (e.g. specs/metaworld.yaml)"),
    ],
    ids=["missing", "directory"],
)
def test_unreadable_spec_path(name: str, message: str, in_repo: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", name]) == 2
    assert capsys.readouterr() == ("", message + "\n")


@pytest.mark.parametrize("path", GOOD + COMMITTED, ids=lambda p: rel(p).removeprefix("tests/fixtures/specs/"))
def test_good_spec_validates(path: Path, in_repo: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", rel(path)]) == 0
    assert capsys.readouterr() == (f"{rel(path)}: ok\n", "")


def test_committed_specs_exist() -> None:
    assert {p.name for p in COMMITTED} >= {"metaworld.yaml", "libero.yaml"}
