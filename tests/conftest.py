"""Shared test set-up: offscreen rendering defaults, `--update-goldens` and the fixtures. The plain helpers the test
files import are in helpers.py (`from helpers import ...`)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from helpers import RENDER_ENV, REPO, runner_run

for _key, _value in RENDER_ENV.items():
    os.environ.setdefault(_key, _value)

# Ctrl-C as from a terminal, also when the suite runs as a background job of a script (.ci/test.sh runs its suites
# side by side): bash starts those with SIGINT ignored, an ignored signal stays ignored across exec, and the tests of
# what Ctrl-C does (in this process and in every `runner` they start) would then test nothing.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        help="rewrite golden files (expected messages, generated CI files) from the current output",
    )


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


@pytest.fixture
def repo_root() -> Path:
    return REPO


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    """The repository as the working directory (specs/ relative; `tests.policies_for_tests` importable)."""
    monkeypatch.chdir(REPO)


# ── real Meta-World runs for the report and comparison tests (run once per test session) ─────────────

REPORT_TASKS = "reach-v3,button-press-v3,drawer-open-v3"


@pytest.fixture(scope="session")
def metaworld_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The scripted experts and the random policy on three Meta-World tasks, 4 episodes each (paired: the same
    seeds), one video per task; and the random policy again from other seeds."""
    base = tmp_path_factory.mktemp("metaworld_runs")
    common = (f"env.task={REPORT_TASKS}", "eval.n_episodes=4", "env.max_steps=150", "eval.videos=1")
    runs = {"scripted": ("policy.type=scripted",), "random": ("policy.type=random",),
            "random_seed2000": ("policy.type=random", "eval.seed=2000", "eval.videos=0")}
    for name, extra in runs.items():
        runner_run("specs/metaworld.yaml", base / name, *common, *extra, batch_size=2, timeout=900, check=True)
    return {name: base / name for name in runs}
