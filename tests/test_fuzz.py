"""Fuzzing (Hypothesis, derandomized so every CI run tries the same inputs, bounded in examples and time) of what
may come from anyone: spec documents and `--set` values, and the results files that resume and merge read.

Properties: never a traceback (only runner's own errors, one readable message), never a write outside the
directories a command owns, never a "complete" run with an episode missing."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import yaml
from helpers import TASKS, full_records, run_file, write_dir
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from runner.cli.main import main
from runner.errors import RunnerError
from runner.results import read_run_file
from runner.results.coverage import video_relpath
from runner.results.rundir import RunDir
from runner.results.runfile import COMPLETE
from runner.spec import SpecError, load_spec
from runner.text import has_hidden

FUZZ = settings(derandomize=True, deadline=None, max_examples=150,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Characters that break naive code: controls, line breaks, bidi, zero width, BOM, look-alikes, quotes, YAML syntax.
NASTY = "\x00\x1b\n\r\t\u2028\u2029\u202e\u2066\u200b\ufeff\u0435'\"${}[]:#&*!|>%@`\\ -."
texts = st.text(alphabet=st.one_of(st.sampled_from(NASTY), st.characters(codec="utf-8")), max_size=40)
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
                    st.floats(allow_nan=True, allow_infinity=True), texts)
BENIGN = [0, 1, 2, 5, True, False, None, "push-v3", "reach-v3,push-v3", "push-v3,push-v3", "easy", "random",
          "spread", "cpu", [0, 1], {}]
values = st.one_of(st.sampled_from(BENIGN), st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=12))

BASE = {
    "name": "fz",
    "install": {"extras": ["metaworld"], "env": {"MUJOCO_GL": "egl"}},
    "env": {"type": "metaworld", "task": "push-v3", "kwargs": {}},
    "policy": {"type": "random", "kwargs": {}},
    "eval": {"n_episodes": 2, "batch_size": 1, "seed": 1000, "videos": 0},
    "ci": {"set": {"eval.n_episodes": 1}, "smoke": [{"name": "s", "run": ["echo", "hi"]}]},
}
PATHS = [("name",), ("install", "extras"), ("install", "env", "MUJOCO_GL"), ("env",), ("env", "type"),
         ("env", "task"), ("env", "task_ids"), ("env", "kwargs", "x"), ("env", "camera_name_mapping"),
         ("policy", "type"), ("policy", "path"), ("policy", "kwargs", "y"), ("eval", "n_episodes"),
         ("eval", "seed"), ("eval", "schedule"), ("ci", "set", "policy.kwargs.y"), ("ci", "smoke", 0, "run"),
         ("extends",), ("description",)]


def mutate(data: dict, path: tuple, value: object) -> dict:
    out = json.loads(json.dumps(data))
    node = out
    for part in path[:-1]:
        if isinstance(node, dict):
            node = node.setdefault(part, {})
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            return out
    if isinstance(node, dict):
        node[path[-1]] = value
    elif isinstance(node, list) and isinstance(path[-1], int) and path[-1] < len(node):
        node[path[-1]] = value
    return out


def accepted_everywhere(spec, root: Path) -> None:
    """What `validate` accepts, the run's task plan and `gen-ci` accept too (no validate-vs-run or validate-vs-gen-ci
    gap): the adapter's task list, and the image and workflow rendered when the install section is complete."""
    from runner.envs import get_adapter
    from runner.generate import render
    from runner.install.needs import problems

    get_adapter(spec.env.type).tasks(spec.env)
    if not problems(spec):
        render([spec], root)


GAP_CASES = {  # edits where validate and the run (or gen-ci) once disagreed, and their neighbours
    "metaworld task twice": {"env": {"type": "metaworld", "task": "push-v3,push-v3"}},
    "gym id twice": {"env": {"type": "gym", "task": "CartPole-v1,CartPole-v1"}},
    "group and its task": {"env": {"type": "metaworld", "task": "easy,reach-v3"}},
    "prefixed and plain name": {"env": {"type": "metaworld", "task": "metaworld-push-v3,push-v3"}},
    "task id past a group": {"env": {"type": "metaworld", "task": "easy", "task_ids": [27, 28]}},
    "empty item": {"env": {"type": "metaworld", "task": "push-v3,,reach-v3"}},
}


@pytest.mark.parametrize("case", sorted(GAP_CASES))
def test_validate_accepts_only_what_the_run_and_gen_ci_accept(tmp_path, case):
    data = json.loads(json.dumps(BASE))
    for section, values in GAP_CASES[case].items():
        data[section] = {**data[section], **values}
    if data["env"]["type"] == "gym":
        data["install"] = {}
    path = tmp_path / "specs" / "fz.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(data))
    try:
        spec = load_spec(path)
    except SpecError as exc:
        check_spec_error(exc)
        return
    accepted_everywhere(spec, tmp_path)


def check_spec_error(exc: SpecError) -> None:
    text = str(exc)
    assert text and all(line and has_hidden(line) is None for line in text.split("\n")), repr(text)
    assert len(exc.problems) == len(text.split("\n"))  # one problem, one line


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(PATHS), values), max_size=3),
       drop=st.sampled_from([None] * 10 + ["name", "env", "policy", "eval", "ci"]),
       rename=st.sampled_from([None] * 10 + [("env", "envv"), ("env", "\ufeffenv"), ("env", "\u0435nv"),
                                             ("name", "n\u200bame")]))
def test_spec_documents(tmp_path_factory, edits, drop, rename):
    data = BASE
    for path, value in edits:
        data = mutate(data, path, value)
    data = dict(data)
    if drop:
        data.pop(drop, None)
    if rename and rename[0] in data:
        data[rename[1]] = data.pop(rename[0])
    root = tmp_path_factory.mktemp("spec")
    path = root / "specs" / "fz.yaml"
    path.parent.mkdir()
    try:
        text = yaml.safe_dump(data, allow_unicode=True)
    except yaml.YAMLError:
        return
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        spec = load_spec(path)
    except SpecError as exc:
        event("refused")
        check_spec_error(exc)
        return
    event("valid")
    json.dumps(spec.to_dict(), allow_nan=False)  # what `runner show --format json` prints is JSON
    accepted_everywhere(spec, root)


@FUZZ
@given(raw=st.binary(max_size=300) | texts.map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_spec_bytes(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("raw") / "fz.yaml"
    path.write_bytes(raw)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    check_spec_error(caught.value)


@FUZZ
@given(key=st.one_of(texts, st.sampled_from([p for p in [".".join(map(str, p)) for p in PATHS]])), value=texts)
def test_set_overrides(tmp_path_factory, key, value):
    root = tmp_path_factory.mktemp("set")
    path = root / "specs" / "fz.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(BASE))
    try:
        spec = load_spec(path, [f"{key}={value}"])
    except SpecError as exc:
        check_spec_error(exc)
        return
    accepted_everywhere(spec, root)


def test_cli_never_prints_a_traceback_for_fuzzed_specs(tmp_path, capsys):
    """The same through `runner validate` / `runner show` in process: exit 0 or 2, stderr without a traceback."""
    rng = random.Random(0)
    for i in range(60):
        data = BASE
        for _ in range(rng.randint(1, 3)):
            value = rng.choice([None, -1, 10**20, 1e308, "x\u202ey", "${{ x }}", [1, [2]], {"a": {"b": None}}, "",
                                "push-v3"])
            data = mutate(data, rng.choice(PATHS), value)
        path = tmp_path / f"case{i}" / "fz.yaml"
        path.parent.mkdir()
        path.write_text(yaml.safe_dump(data, allow_unicode=True))
        for argv in (["validate", str(path)], ["show", str(path), "--format", "json"]):
            code = main(argv)
            out, err = capsys.readouterr()
            assert code in (0, 2) and "Traceback" not in err, (argv, err)
            if argv[0] == "show" and code == 0:
                json.loads(out)


# ── results files given to resume and merge ──────────────────────────────────────────────────────────

json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-(10**12), 10**12),
                                     st.floats(allow_nan=False, allow_infinity=False), texts),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(texts, inner, max_size=3)), max_leaves=8)
RUN_KEYS = ["spec_name", "spec_hash", "state", "shard", "n_episodes", "tasks", "labels", "eval_s", "invocation",
            "merged_from", "spec", "format", "provenance"]
RECORD_KEYS = ["task_group", "task_id", "task", "episode_index", "seed", "steps", "sum_reward", "max_reward",
               "success", "wall_s", "video_path", "status", "error"]
line_edits = st.one_of(
    st.tuples(st.just("field"), st.integers(0, 5), st.sampled_from(RECORD_KEYS), json_values),
    st.tuples(st.just("video"), st.integers(0, 5), st.sampled_from(
        ["../x.mp4", "/etc/passwd", "videos/easy_0/../../../x.mp4", "videos/easy_1/eval_episode_0.mp4"]), st.none()),
    st.tuples(st.just("duplicate"), st.integers(0, 5), st.none(), st.none()),
    st.tuples(st.just("drop"), st.integers(0, 5), st.none(), st.none()),
    st.tuples(st.just("garbage"), st.integers(0, 5), st.none(), st.binary(max_size=50)),
    st.tuples(st.just("truncate"), st.integers(0, 5), st.none(), st.integers(1, 80)),
)


def tampered_dir(path: Path, run_edit, line_edit_list) -> Path:
    write_dir(path, run_file(), full_records())
    if run_edit is not None:
        data = json.loads((path / "run.json").read_text())
        key, value = run_edit
        data[key] = value
        (path / "run.json").write_text(json.dumps(data))
    lines = (path / "episodes.jsonl").read_bytes().split(b"\n")[:-1]
    for kind, i, key, value in line_edit_list:
        i = min(i, len(lines) - 1) if lines else 0
        if not lines:
            break
        if kind == "field":
            try:
                data = json.loads(lines[i])
                data[key] = value
                lines[i] = json.dumps(data).encode()
            except ValueError:
                pass
        elif kind == "video":
            try:
                data = json.loads(lines[i])
                data["video_path"] = key
                lines[i] = json.dumps(data).encode()
            except ValueError:
                pass
        elif kind == "duplicate":
            lines.append(lines[i])
        elif kind == "drop":
            del lines[i]
        elif kind == "garbage":
            lines[i] = value
        elif kind == "truncate":
            lines[-1] = lines[-1][:value]
    (path / "episodes.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def snapshot(root: Path, skip: Path) -> dict[str, bytes]:
    """Every file under root except those under `skip` (what a command may write)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and not p.is_relative_to(skip)}


@FUZZ
@given(run_edit=st.one_of(st.none(), st.tuples(st.sampled_from(RUN_KEYS), json_values)),
       edits=st.lists(line_edits, max_size=4))
def test_merge_of_tampered_results(tmp_path_factory, run_edit, edits):
    root = tmp_path_factory.mktemp("merge")
    source = tampered_dir(root / "in" / "src", run_edit, edits)
    (root / "outside").mkdir()
    (root / "outside" / "x.mp4").write_bytes(b"secret")
    out = root / "out"
    before = snapshot(root, out)
    try:
        code = main(["merge", str(source), "--output-dir", str(out)])
    except SystemExit as exc:  # argparse only; never here
        pytest.fail(f"merge exited through SystemExit({exc.code})")
    assert code in (0, 1, 2, 4)
    event(f"merge exit {code}")
    assert snapshot(root, out) == before  # nothing written anywhere else (inputs untouched)
    if code in (0, 4):  # written: complete, every episode present
        merged = read_run_file(out)
        assert merged.state == COMPLETE
        keys = {json.loads(line)["episode_index"] for line in (out / "episodes.jsonl").read_text().splitlines()}
        assert len((out / "episodes.jsonl").read_text().splitlines()) == merged.plan.size and keys
    else:
        assert not out.exists()  # a failed merge writes nothing


@FUZZ
@given(run_edit=st.one_of(st.none(), st.tuples(st.sampled_from(RUN_KEYS), json_values)),
       edits=st.lists(line_edits, max_size=4), fmt=st.sampled_from(["html", "markdown", "json"]))
def test_report_and_compare_of_tampered_results(tmp_path_factory, run_edit, edits, fmt):
    """A tampered directory is reported (from what the ledger rules accept) or refused with exit 2; the report
    is the only file written, and no markup from the results reaches it."""
    root = tmp_path_factory.mktemp("report")
    source = tampered_dir(root / "in" / "src", run_edit, edits)
    clean = write_dir(root / "in" / "clean", run_file(), full_records())
    out = root / "out"
    out.mkdir()
    before = snapshot(root, out)
    code = main(["report", str(source), "--format", fmt, "-o", str(out / f"r.{fmt}")])
    assert code in (0, 2)
    event(f"report exit {code}")
    compared = main(["compare", str(clean), str(source), "--json", str(out / "c.json")])
    assert compared in (0, 2)
    assert snapshot(root, out) == before
    if code == 0:
        text = (out / f"r.{fmt}").read_text()
        assert "<script" not in text and "<img" not in text
        if fmt == "json":
            json.loads(text)


@FUZZ
@given(run_edit=st.one_of(st.none(), st.tuples(st.sampled_from(RUN_KEYS), json_values)),
       edits=st.lists(line_edits, max_size=4))
def test_resume_of_tampered_results(tmp_path_factory, run_edit, edits):
    """What `runner run` does to an existing directory before any episode: inspect it under the ledger rules, then
    open and finish the session. A directory with a gap never ends up "complete"."""
    root = tmp_path_factory.mktemp("resume")
    path = tampered_dir(root / "run", run_edit, edits)
    run_dir = RunDir(path, run_file().with_state("running"))
    try:
        prior = run_dir.inspect()
    except RunnerError as exc:
        event(f"refused: {type(exc).__name__}")
        assert str(exc) and "Traceback" not in str(exc)
        return
    assert not prior.coverage.foreign and not prior.coverage.conflicts
    try:
        with run_dir.open() as session:
            session.finish(0.0)
    except RunnerError:
        event("opened, episodes missing: not complete")
        assert read_run_file(path).state != COMPLETE
        assert prior.coverage.missing
        return
    event("opened, nothing missing: complete")
    assert not prior.coverage.missing and read_run_file(path).state == COMPLETE
    assert not any(p.name.startswith(".") and p.suffix == ".tmp" for p in path.iterdir())


def test_fuzzed_video_paths_never_leave_the_directory(tmp_path, capsys):
    for i, bad in enumerate(["../../x.mp4", "/tmp/x.mp4", "videos/../../x.mp4", "videos/easy_0/./eval_episode_0.mp4",
                             "videos\\..\\x.mp4", "videos/easy_0/eval_episode_0.mp4\x00", video_relpath(TASKS[1], 0)]):
        records = full_records()
        records[0] = records[0].__class__(**{**records[0].__dict__, "video_path": bad})
        source = write_dir(tmp_path / f"s{i}", run_file(), records)
        code = main(["merge", str(source), "--output-dir", str(tmp_path / f"o{i}")])
        _, err = capsys.readouterr()
        assert code == 1 and "names the video" in err and not (tmp_path / f"o{i}").exists(), err
    assert sorted(os.listdir(tmp_path)) == [f"s{i}" for i in range(7)]  # no output, nothing outside
