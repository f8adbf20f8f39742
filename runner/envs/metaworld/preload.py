"""Imported once by the worker forkserver (`MetaWorldAdapter.preload`), never by the engine itself.

Building a first Meta-World env compiles the robot's meshes and textures into MuJoCo's process-wide
asset cache (≈ 32 MB, ≈ 0.15 s here); every later build of any task reads them from the cache. Doing it
here, before workers are forked, pays that once per run instead of once per worker (measured in
`benchmarks/throughput.py`). No renderer and no GL context is created, and the global NumPy RNG is left
as it was. A failure here is ignored: the warm-up is only an optimisation, and the same failure then
reaches the user through a worker's own env build, with the engine's error handling.
"""

from __future__ import annotations

import contextlib

import numpy as np
from metaworld import env_dict

_state = np.random.get_state()
with contextlib.suppress(Exception):  # multiprocessing's forkserver would die of anything but an ImportError
    env_dict.ALL_V3_ENVIRONMENTS["reach-v3"]().close()
np.random.set_state(_state)
del _state
