"""Offscreen rendering with MuJoCo: checked once, in a throwaway process, before a run that renders starts.

Without a working GL platform MuJoCo fails late and badly: in the main process (batch size 1) GLFW without a
display can abort the whole process (SIGABRT), and in worker processes every episode fails the same way and is
retried. `require_offscreen_gl()` renders one 8x8 frame of an empty model in a child process with this
process's environment (`MUJOCO_GL`, `PYOPENGL_PLATFORM`, `DISPLAY`) and, when that fails, raises one message
with the fix; when it works, it returns the GL renderer's name (Mesa's llvmpipe: software rendering on the CPU;
a GPU's), from which the engine sizes its workers. The answer is cached for the process.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

from runner.errors import MissingDependencyError

PROBE_TIMEOUT_S = 120.0
_PROBE = """\
import mujoco
model = mujoco.MjModel.from_xml_string("<mujoco/>")
renderer = mujoco.Renderer(model, 8, 8)
renderer.update_scene(mujoco.MjData(model))
renderer.render()
try:
    from OpenGL import GL
    name = GL.glGetString(GL.GL_RENDERER)
    print("renderer:", name.decode(errors="replace") if name else "?")
except Exception:  # the name is a hint for sizing workers; rendering itself works
    print("renderer: ?")
renderer.close()
"""
SOFTWARE = ("llvmpipe", "softpipe", "swrast", "swiftshader", "osmesa")  # renderers that rasterise on the CPU
FIX = ("offscreen rendering needs Mesa's EGL (Debian/Ubuntu: apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri) "
       "and MUJOCO_GL=egl PYOPENGL_PLATFORM=egl in the environment (or in the spec's install.env); MUJOCO_GL=osmesa "
       "for software OSMesa, MUJOCO_GL=glfw only with a display")


def probe_offscreen_gl() -> str | None:
    """Why MuJoCo cannot render offscreen here (the child's last error line), or None when it can."""
    return _probe(os.environ.get("MUJOCO_GL"), os.environ.get("PYOPENGL_PLATFORM"), os.environ.get("DISPLAY"))[0]


@functools.cache
def _probe(mujoco_gl: str | None, pyopengl: str | None, display: str | None) -> tuple[str | None, str]:
    """(why rendering fails or None, the renderer's name or "?")."""
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"rendering one frame took more than {PROBE_TIMEOUT_S:g} s", "?"
    except OSError as exc:
        return f"cannot start {sys.executable}: {exc.strerror or exc}", "?"
    if proc.returncode == 0:
        names = [line.partition(":")[2].strip() for line in proc.stdout.splitlines() if line.startswith("renderer:")]
        return None, (names[-1] if names else "?")[:200]
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else f"the probe exited with code {proc.returncode}"
    return last[:300], "?"


def require_offscreen_gl() -> str:
    """The GL renderer's name ("?" when unknown); MissingDependencyError, with the fix, when MuJoCo cannot render
    offscreen here."""
    problem, renderer = _probe(os.environ.get("MUJOCO_GL"), os.environ.get("PYOPENGL_PLATFORM"),
                               os.environ.get("DISPLAY"))
    if problem is not None:
        setting = os.environ.get("MUJOCO_GL")
        where = f"MUJOCO_GL={setting}" if setting else "MUJOCO_GL is not set"
        raise MissingDependencyError(f"MuJoCo cannot render offscreen here ({where}): {problem}. Fix: {FIX}")
    return renderer


def gl_renderer() -> str:
    """The GL renderer's name from the same (cached) probe; "?" when rendering fails or the name is unknown."""
    return _probe(os.environ.get("MUJOCO_GL"), os.environ.get("PYOPENGL_PLATFORM"), os.environ.get("DISPLAY"))[1]


def is_software(renderer: str) -> bool:
    """Whether a GL renderer rasterises on the CPU (MUJOCO_GL=osmesa always does)."""
    return os.environ.get("MUJOCO_GL") == "osmesa" or any(name in renderer.lower() for name in SOFTWARE)


__all__ = ["FIX", "SOFTWARE", "gl_renderer", "is_software", "probe_offscreen_gl", "require_offscreen_gl"]
