"""`runner validate`, `runner show` and every `--help`, run in-process through `main()` (and once as a process)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
from helpers import REPO, SHIPPED, installed_runner, runner_cli

from runner.cli.main import build_parser, main
from runner.spec import load_spec
from runner.spec.yamlload import load

MINIMAL = "env:\n  type: metaworld\n  task: push-v3\npolicy:\n  type: random\ninstall:\n  extras: [metaworld]\n"


def subcommands() -> list[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(action.choices)


# --- show -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["specs/metaworld.yaml", "specs/libero.yaml"])
def test_show_yaml_is_the_resolved_spec(spec: str, in_repo: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", spec]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    shown = load("shown", out).data  # the spec loader's own strict YAML reads it back
    assert shown == load_spec(spec).to_dict()
    assert shown["install"]["env"]["MUJOCO_GL"] == "egl"  # inherited from specs/_base.yaml through _gpu_hub.yaml
    assert shown["eval"]["videos"] == 1 and shown["ci"]["hub_login"] is True


def test_show_json_with_overrides(in_repo: None, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["show", "specs/metaworld.yaml", "--format", "json", "--set", "eval.n_episodes=1", "--set", "env.task=easy"]
    assert main(args) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == load_spec("specs/metaworld.yaml", ["eval.n_episodes=1", "env.task=easy"]).to_dict()
    assert (shown["eval"]["n_episodes"], shown["env"]["task"]) == (1, "easy")
    assert shown["eval"]["batch_size"] == 0 and shown["env"]["task_ids"] is None  # defaults filled in


@pytest.mark.parametrize("spec", ["specs/metaworld.yaml", "specs/pusht.yaml", "specs/aloha_transfer_cube.yaml"])
def test_show_origins_marks_every_inherited_value(spec: str, in_repo: None, capsys: pytest.CaptureFixture[str]) -> None:
    """What copying a shipped spec inherits is visible: each value from a partial names its file and line, a --set
    says so, a default says "default"; the spec's own values carry no comment; the output is the resolved spec."""
    assert main(["show", spec, "--origins", "--set", "eval.seed=7"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert load("shown", out).data == load_spec(spec, ["eval.seed=7"]).to_dict()
    comments = {line.split(":")[0].strip(): line.rsplit(" # ", 1)[1] for line in out.splitlines() if " # " in line}
    assert comments["gpu"].startswith("specs/_gpu_hub.yaml:") and comments["hub_login"].startswith("specs/_gpu_hub")
    assert comments["MUJOCO_GL"].startswith("specs/_base.yaml:") and comments["shm_size"].startswith("specs/_base")
    assert comments["seed"] == "--set eval.seed=7" and comments["schedule"] in ("default", "specs/_gpu_hub.yaml:14")
    assert comments["pip"] == "default"
    assert "name" not in comments  # the spec's own
    if spec == "specs/aloha_transfer_cube.yaml":  # it extends aloha.yaml, which extends _gpu_hub.yaml
        assert comments["type"].startswith("specs/aloha.yaml:")
    else:
        assert "type" not in comments and "n_episodes" not in comments


def test_show_origins_is_yaml_only(in_repo: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "specs/metaworld.yaml", "--origins", "--format", "json"]) == 2
    assert "--origins" in capsys.readouterr().err


def test_show_invalid_spec(in_repo: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "specs/metaworld.yaml", "--set", "eval.seed=-1"]) == 2
    assert capsys.readouterr() == ("", "--set eval.seed=-1: eval.seed: -1 is out of range: must be at least 0\n")


# --- validate -------------------------------------------------------------------------------------


def test_validate_discovers_specs_but_skips_partials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "_partial.yaml").write_text(MINIMAL)  # no name: invalid on its own
    (specs / "b.yaml").write_text("name: b\nextends: _partial.yaml\n")
    (specs / "a.yaml").write_text("name: a\n" + MINIMAL)
    (specs / "notes.txt").write_text("not a spec")
    monkeypatch.chdir(tmp_path)
    assert main(["validate"]) == 0
    assert capsys.readouterr() == ("specs/a.yaml: ok\nspecs/b.yaml: ok\n", "")


def test_validate_without_specs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["validate"]) == 2
    assert capsys.readouterr() == (
        "",
        "runner: error: no specs given and none found in ./specs/*.yaml "
        "(run from the repository root or name a spec)\n",
    )


def test_validate_several_files_reports_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "good.yaml").write_text("name: good\n" + MINIMAL)
    (tmp_path / "bad1.yaml").write_text("name: bad1\n" + MINIMAL + "eval: {seed: x, n_episodes: 0}\n")
    (tmp_path / "bad2.yaml").write_text("name: bad2\n" + MINIMAL.replace("push-v3", "push-v9"))
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "bad2.yaml", "good.yaml", "bad1.yaml", "missing.yaml"]) == 2
    out, err = capsys.readouterr()
    assert out == "good.yaml: ok\n"
    assert err.splitlines() == [
        "bad2.yaml:4:9: env.task: unknown Meta-World task or group 'push-v9' (groups: easy, medium, hard, very_hard, "
        "mt50; `runner list` shows the tasks); did you mean 'push-v3'?",
        'bad1.yaml:9:14: eval.seed: expected integer, got string "x"',
        "bad1.yaml:9:29: eval.n_episodes: 0 is out of range: must be at least 1",
        "missing.yaml: no such file",
    ]


def test_validate_applies_overrides_to_every_spec(in_repo: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--set", "eval.n_episodes=0"]) == 2
    assert capsys.readouterr().err == (
        "--set eval.n_episodes=0: eval.n_episodes: 0 is out of range: must be at least 1\n" * len(SHIPPED)
    )


def test_validate_end_to_end_on_committed_specs() -> None:
    result = runner_cli("validate", command=installed_runner(), timeout=60)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "".join(f"specs/{name}.yaml: ok\n" for name in SHIPPED)


# --- --help ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [[], *([name] for name in subcommands())], ids=lambda a: " ".join(["runner", *a]))
def test_help_has_examples(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    out, err = capsys.readouterr()
    assert info.value.code == 0 and err == ""
    assert "\nexamples:\n" in out
    examples = out.split("\nexamples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert examples and all(line.startswith("  runner ") for line in examples), examples
    if argv:
        assert all(line.startswith(f"  runner {argv[0]}") for line in examples), examples


def test_help_end_to_end() -> None:
    result = runner_cli("--help", timeout=60)
    assert result.returncode == 0 and "examples:" in result.stdout and result.stderr == ""
    assert {"validate", "show", "list"} <= set(subcommands())


@pytest.mark.parametrize("fixture", ["top_key_misspelled", "top_key_bom", "top_key_lookalike"])
@pytest.mark.parametrize("argv", [["validate"], ["show"], ["run"], ["list"], ["gen-ci"], ["gen-ci", "--check"],
                                  ["prepare"]], ids=" ".join)
def test_a_misspelled_top_level_key_is_one_message_in_every_command(fixture: str, argv: list[str],
                                                                      tmp_path: Path, monkeypatch, capsys) -> None:
    """Every command that reads specs (and the pre-commit hooks, which run `validate` and `gen-ci --check` in the
    repository root) reports the spec problem, never a KeyError."""
    (tmp_path / "specs").mkdir()
    text = (REPO / "tests" / "fixtures" / "specs" / "bad" / f"{fixture}.yaml").read_bytes()
    (tmp_path / "specs" / f"{fixture}.yaml").write_bytes(text)
    monkeypatch.chdir(tmp_path)
    args = [*argv] if argv[0] == "gen-ci" else [*argv, f"specs/{fixture}.yaml"]
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert f"specs/{fixture}.yaml:2:1: " in err and "unknown key" in err and "did you mean 'env'?" in err
    assert "Traceback" not in err and "KeyError" not in err


def test_a_ctrl_c_swallowed_by_a_weakref_callback_still_interrupts(monkeypatch, capsys):
    """CPython swallows a KeyboardInterrupt raised in a weakref callback (as during an import: importlib's module
    locks run one) and prints "Exception ignored"; main() delivers it again, so the command still stops with 130."""
    import time
    import weakref

    import runner.cli.main as cli_main

    def interrupted_in_a_callback(argv):
        class Lock:
            pass

        def callback(_ref):
            raise KeyboardInterrupt

        lock = Lock()
        ref = weakref.ref(lock, callback)
        del lock  # the callback runs here and its interrupt is swallowed
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:  # where the interrupt lands again
            pass
        return 0 if ref is not None else 1

    monkeypatch.setattr(cli_main, "main_inner", interrupted_in_a_callback)
    hook = sys.unraisablehook
    assert main([]) == 130
    err = capsys.readouterr().err
    assert err == "runner: interrupted\n", err
    assert sys.unraisablehook is hook  # put back


@pytest.mark.parametrize("args, usage, hint", [
    (["run", "specs/metaworld.yaml", "--episodes", "5"], "usage: runner run",
     "did you mean --set eval.n_episodes=5?"),
    (["run", "specs/metaworld.yaml", "--eval.n_episodes=5"], "usage: runner run",
     "spec keys go with --set: --set eval.n_episodes=5"),
    (["run", "specs/metaworld.yaml", "--batchsize", "2"], "usage: runner run", "did you mean --batch-size 2?"),
    (["validate", "--sett", "eval.seed=1"], "usage: runner validate", "did you mean --set?"),  # (not ci.set)
    # no abbreviations: --policy is not --policy-in-main, --resum not --resume
    (["run", "specs/metaworld.yaml", "--policy", "random"], "usage: runner run",
     "did you mean --set policy.type=random?"),
    (["run", "specs/metaworld.yaml", "--resum"], "usage: runner run", "did you mean --resume?"),
])
def test_an_unknown_option_shows_the_commands_usage_and_a_did_you_mean(args, usage, hint):
    proc = runner_cli(*args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(usage) and hint in proc.stderr, proc.stderr


def test_a_ctrl_c_that_cpython_wraps_is_still_an_interrupt(monkeypatch, capsys):
    """A Ctrl-C while a class is being created (an import at start-up) reaches main() as "RuntimeError: Error
    calling __set_name__" caused by the KeyboardInterrupt: one line, exit 130, no traceback."""
    import dataclasses

    import runner.cli.main as cli_main

    class Interrupting:
        def __set_name__(self, owner, name):
            raise KeyboardInterrupt

    def create_a_class(argv):
        @dataclasses.dataclass
        class Spec:
            field: object = dataclasses.field(default=Interrupting())
        return 0

    monkeypatch.setattr(cli_main, "main_inner", create_a_class)
    assert main([]) == 130
    assert capsys.readouterr().err == "runner: interrupted\n"


def test_a_ctrl_c_after_the_work_is_complete_says_so_and_the_next_command_starts_afresh(monkeypatch, capsys):
    """Once a command noted its work complete (a run's last output written), a Ctrl-C before the exit says that
    nothing was lost instead of a bare "interrupted"; the next command in the same process forgets the note."""
    import runner.cli.main as cli_main
    from runner.interrupts import note_finished

    def finish_then_interrupt(argv):
        note_finished("interrupted after the run finished; every output is written: results in out")
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main, "main_inner", finish_then_interrupt)
    assert main([]) == 130
    assert capsys.readouterr().err == "runner: interrupted after the run finished; every output is written: " \
                                      "results in out\n"

    def interrupt(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main, "main_inner", interrupt)
    assert main([]) == 130
    assert capsys.readouterr().err == "runner: interrupted\n"
