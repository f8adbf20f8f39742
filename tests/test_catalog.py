"""Meta-World's catalog (runner.envs.metaworld.catalog, read without any simulator) and the scripted policy's
experts agree with the installed Meta-World."""

from __future__ import annotations

import pytest

from runner.envs.metaworld import catalog
from runner.policies.scripted import EXPERTS

pytest.importorskip("metaworld")
import metaworld  # noqa: E402
import metaworld.policies  # noqa: E402
from metaworld import env_dict  # noqa: E402


def test_the_catalog_names_every_v3_task():
    """Same set as Meta-World's MT1/MT50 (the catalog keeps LeRobot's task order, which differs from MT50's)."""
    assert len(catalog.METAWORLD_TASKS) == 50 and list(EXPERTS) == list(catalog.METAWORLD_TASKS)
    assert set(catalog.METAWORLD_TASKS) == set(metaworld.MT1.ENV_NAMES) == set(env_dict.MT50_V3)


@pytest.mark.parametrize("name", list(catalog.METAWORLD_TASKS))
def test_task_has_its_expert_and_text(name):
    text, expert = catalog.METAWORLD_TASKS[name], EXPERTS[name]
    assert name in env_dict.ALL_V3_ENVIRONMENTS
    assert issubclass(getattr(metaworld.policies, expert), metaworld.policies.policy.Policy)
    assert text and text == text.strip()


def test_groups_partition_mt50():
    parts = [catalog.METAWORLD_GROUPS[g] for g in ("easy", "medium", "hard", "very_hard")]
    assert [len(p) for p in parts] == [28, 11, 6, 5]
    merged = [name for part in parts for name in part]
    assert len(merged) == len(set(merged)) == 50
    assert set(merged) == set(catalog.METAWORLD_GROUPS["mt50"]) == set(catalog.METAWORLD_TASKS)


@pytest.mark.parametrize("name", ["push-v3", "assembly-v3", "door-open-v3", "shelf-place-v3"])
def test_cameras_are_the_models_cameras(name):
    import mujoco

    env = env_dict.ALL_V3_ENVIRONMENTS[name]()
    cameras = {mujoco.mj_id2name(env.model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(env.model.ncam)}
    assert set(catalog.METAWORLD_CAMERAS) == cameras
    assert mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_CAMERA, "corner2") == 2  # LeRobot moves cam_pos[2]
    env.close()
