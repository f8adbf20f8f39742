"""LeRobot tests: run with `.venv-lerobot/bin/python -m pytest tests/lerobot` (set up by .ci/setup-lerobot.sh).

The core suite (`.venv`, Python 3.11) leaves this folder out with `--ignore=tests/lerobot`. Run here without
LeRobot, every test fails with one message saying how to set it up (they never skip silently).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers import REPO
from lerobot_testlib import SETUP, VENV

os.environ["HF_HUB_OFFLINE"] = "1"  # these tests never touch the hub (tests/conftest.py sets offscreen rendering)


def _lerobot_problem() -> str | None:
    """Why LeRobot cannot be used here (by its installed distribution: on sys.path, this very folder would pass
    for a `lerobot` namespace package)."""
    from importlib import metadata

    try:
        metadata.version("lerobot")
        import lerobot.configs  # noqa: F401
    except (metadata.PackageNotFoundError, ImportError) as exc:
        where = "" if VENV.is_dir() else f" ({VENV} does not exist)"
        return (f"LeRobot is not installed for {sys.executable} ({type(exc).__name__}: {exc}){where}: run {SETUP}, "
                f"then {VENV.relative_to(REPO)}/bin/python -m pytest tests/lerobot")
    return None


PROBLEM = _lerobot_problem()


@pytest.fixture(autouse=True, scope="session")
def _needs_lerobot() -> None:
    if PROBLEM:
        pytest.fail(PROBLEM, pytrace=False)


@pytest.fixture(scope="session")
def policy_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Random ACT policies (same seed): `image` reads observation.image, `camera1` observation.images.camera1."""
    from make_random_policy import build_random_act  # this folder is on sys.path (pytest's rootdir conftest)

    root = tmp_path_factory.mktemp("policies")
    return {
        "image": build_random_act(root / "act_image"),
        "camera1": build_random_act(root / "act_camera1", image_key="observation.images.camera1"),
    }
