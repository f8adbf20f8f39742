"""VideoWriter: a real libx264/yuv420p mp4, read back with imageio."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import read_video

from runner.results.video import VideoWriter


def frames(n: int, h: int, w: int) -> list[np.ndarray]:
    out = []
    for i in range(n):
        f = np.zeros((h, w, 3), np.uint8)
        f[..., 0] = (i * 9) % 256  # a red ramp over time
        f[: h // 2, :, 1] = 200  # a green top half
        out.append(f)
    return out


@pytest.mark.parametrize(("fps", "h", "w"), [(80.0, 64, 48), (20.0, 33, 47)], ids=["80fps-even", "20fps-odd"])
def test_written_video_reads_back(tmp_path, fps, h, w):
    path = tmp_path / "videos" / "easy_0" / "eval_episode_0.mp4"
    src = frames(25, h, w)
    with VideoWriter(path, fps) as writer:
        for f in src:
            writer.add(f)
    assert writer.n_frames == 25
    assert [p.name for p in path.parent.iterdir()] == ["eval_episode_0.mp4"]  # no temp file left
    meta, data = read_video(path)
    assert meta["codec"] == "h264" and meta["pix_fmt"].startswith("yuv420p")
    assert meta["fps"] == pytest.approx(fps)
    assert len(data) == 25
    assert data[0].shape == (h + h % 2, w + w % 2, 3)  # odd sizes are padded by one row/column
    for got, want in zip(data, src, strict=True):
        assert np.abs(got[:h, :w].astype(int) - want.astype(int)).mean() < 6  # lossy, but the same picture


def test_file_appears_only_when_finished(tmp_path):
    path = tmp_path / "v.mp4"
    writer = VideoWriter(path, 10)
    for f in frames(3, 16, 16):
        writer.add(f)
    assert not path.exists()  # still being written under a temporary name
    writer.close()
    assert path.is_file()
    writer.close()  # idempotent


def test_exception_in_block_discards_the_video(tmp_path):
    path = tmp_path / "v.mp4"
    with pytest.raises(RuntimeError), VideoWriter(path, 10) as writer:
        writer.add(frames(1, 16, 16)[0])
        raise RuntimeError("episode failed")
    assert list(tmp_path.iterdir()) == []


def test_bad_frames_are_refused(tmp_path):
    writer = VideoWriter(tmp_path / "v.mp4", 10)
    with pytest.raises(ValueError, match=r"\(H, W, 3\) uint8"):
        writer.add(np.zeros((16, 16, 3), np.float32))
    with pytest.raises(ValueError, match=r"\(H, W, 3\) uint8"):
        writer.add(np.zeros((16, 16), np.uint8))
    writer.add(np.zeros((16, 16, 3), np.uint8))
    with pytest.raises(ValueError, match="frame shape changed"):
        writer.add(np.zeros((32, 16, 3), np.uint8))
    writer.abort()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="fps"):
        VideoWriter(tmp_path / "w.mp4", 0)


def test_no_frames_no_file(tmp_path):
    with VideoWriter(tmp_path / "v.mp4", 10) as writer:
        pass
    assert writer.n_frames == 0 and list(tmp_path.iterdir()) == []


def test_frames_are_copied_when_added_and_encoded_while_the_caller_goes_on(tmp_path):
    """add() hands a copy to the feeder thread: a caller that reuses its buffer does not change earlier frames."""
    path = tmp_path / "v.mp4"
    buffer = np.zeros((32, 32, 3), np.uint8)
    with VideoWriter(path, 10) as writer:
        for value in (0, 250):
            buffer[...] = value
            writer.add(buffer)
        buffer[...] = 120  # after the last add: must not reach the file
    _, data = read_video(path)
    assert [int(round(f.mean())) for f in data] == pytest.approx([0, 250], abs=6)


def test_an_encoder_that_dies_fails_the_video_and_leaves_no_file(tmp_path):
    """ffmpeg killed mid-video: the feeder's broken pipe reaches the caller (add or close), nothing is left."""
    import os
    import signal
    import time
    from pathlib import Path

    path = tmp_path / "v.mp4"
    writer = VideoWriter(path, 10)
    writer.add(frames(1, 64, 64)[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, rest = stat.read_text().rsplit(")", 1)
        except OSError:
            continue
        if rest.split()[1] == str(os.getpid()) and "ffmpeg" in name:
            children.append(int(stat.parent.name))
    assert children, "no ffmpeg child found"
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    with pytest.raises((BrokenPipeError, OSError, RuntimeError)):
        for f in frames(200, 64, 64):
            writer.add(f)
            time.sleep(0.001)
        writer.close()
    writer.abort()
    assert not path.exists() and list(tmp_path.iterdir()) == []
