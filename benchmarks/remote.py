"""Remote against local evaluation on the same episodes, in one run: what serving a policy over WebSocket costs.

Workload A (always): Meta-World's scripted experts, state only, the first tasks of the `easy` group x E episodes
(seeds 1000..), no videos. For W = 1, 2, 4 workers: `runner run` with the experts inside the workers (local), then
`runner run` with `policy.type: remote` against `runner serve` of the same spec on loopback, once in each protocol
(openpi's, vla-eval's); with `--peers` (needs .ci/setup-openpi.sh's .venv-openpi) also against the published
packages' own servers wrapping the same experts: openpi-server's WebsocketPolicyServer (tests/openpi_peer.py
serve-scripted) and a vla-eval PredictModelServer (tests/vlaeval_peer.py serve). A state-only expert costs
microseconds a step, so this is the protocols' worst case: every step is one round trip.

Workload B (`--lerobot`, needs .venv-lerobot): a seeded random-init ACT (ResNet18, 480x480 camera, chunk 10) on
push-v3, episodes cut to `--act-steps` steps, E_act episodes at batch size 2, local (batched in the main process)
and remote (`runner serve` in .venv-lerobot, the client in .venv).

Printed per run: evaluation time (eval_info.json's eval_s: workers up to the last episode), env steps/s, remote
over local; for remote runs, the server's batch-size histogram and mean and its latency percentiles (its /stats,
before and after the run). Every remote run's per-episode results are checked equal to the local run's.

usage: .venv/bin/python benchmarks/remote.py [--quick] [--peers] [--lerobot] [--tasks N] [--episodes E]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

LEROBOT_PYTHON = REPO / ".venv-lerobot" / "bin" / "python"
EASY_TASKS = ["reach-v3", "push-v3", "pick-place-v3", "door-open-v3", "drawer-open-v3", "drawer-close-v3",
              "button-press-topdown-v3", "peg-insert-side-v3"]


def runner_run(python: str, spec: str, out: Path, batch: int, sets: list[str]) -> dict[str, Any]:
    argv = [python, "-m", "runner.cli.main", "run", spec, "--output-dir", str(out), "--batch-size", str(batch),
            "--no-progress"]
    for s in sets:
        argv += ["--set", s]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"runner run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    eval_s = json.loads((out / "eval_info.json").read_text())["overall"]["eval_s"]
    episodes = {(r["task"], r["episode_index"]): (r["steps"], r["sum_reward"], r["max_reward"], r["success"])
                for r in records}
    return {"eval_s": eval_s, "steps": sum(r["steps"] for r in records), "episodes": episodes,
            "successes": sum(r["success"] for r in records)}


def batches(before: dict[str, Any], after: dict[str, Any]) -> Counter:
    return Counter({int(k): v - before["batch_sizes"].get(k, 0) for k, v in after["batch_sizes"].items()
                    if v - before["batch_sizes"].get(k, 0)})


def describe(name: str, run: dict[str, Any], local: dict[str, Any] | None = None) -> str:
    line = f"{name}: {run['eval_s']:.2f} s, {run['steps'] / run['eval_s']:.0f} env steps/s"
    if local is not None:
        line += f", remote / local time {run['eval_s'] / local['eval_s']:.2f}"
    return line


def servers(spec: str, sets: list[str], *, python: str, tmp: Path, peers: bool,
            stack: contextlib.ExitStack) -> list[tuple[str, str, str, Any]]:
    """(name, URL, protocol, runner serve's handle or None) for each server the remote runs go to."""
    from helpers import peer_server, start_server

    out = []
    for protocol in ("openpi", "vla-eval"):
        server = start_server(spec, *sets, python=python, log_dir=tmp,
                              args=("--protocol", protocol, "--log-every", "0"))
        stack.callback(server.stop)
        out.append((f"runner serve, {protocol}", server.url, protocol, server))
    if peers:
        tasks = next(s.split("=", 1)[1] for s in sets if s.startswith("env.task="))  # a text several tasks share
        url, _ = stack.enter_context(peer_server("openpi_peer.py", "serve-scripted", tmp / "openpi-server",
                                                 "--tasks", tasks))
        out.append(("openpi-server", url, "openpi", None))
        url, _ = stack.enter_context(peer_server("vlaeval_peer.py", "serve", tmp / "vla-eval"))
        out.append(("vla-eval server", url, "vla-eval", None))
    return out


def compare(workload: str, spec: str, sets: list[str], widths: list[int], *, local_python: str, client_python: str,
            server_python: str, tmp: Path, peers: bool = False) -> None:
    print(f"\n== {workload}")
    with contextlib.ExitStack() as stack:
        targets = servers(spec, sets, python=server_python, tmp=tmp, peers=peers, stack=stack)
        for width in widths:
            local = runner_run(local_python, spec, tmp / f"local-{width}", width, sets)
            print(f"W={width}: {len(local['episodes'])} episodes, {local['steps']} steps, "
                  f"{local['successes']} successes")
            print("  " + describe("local ", local))
            for name, url, protocol, server in targets:
                before = server.stats() if server is not None else None
                kwargs = json.dumps({"protocol": protocol})
                remote = runner_run(client_python, spec, tmp / f"remote-{width}-{len(name)}-{protocol}", width,
                                    [*sets, "policy.type=remote", f"policy.url={url}", f"policy.kwargs={kwargs}"])
                same = remote["episodes"] == local["episodes"]
                print("  " + describe(f"remote ({name})", remote, local) +
                      f"; per-episode results {'identical' if same else 'DIFFER'}")
                if server is not None:
                    after = server.stats()
                    hist = batches(before, after)
                    n = sum(hist.values())
                    mean = sum(k * v for k, v in hist.items()) / n if n else 0.0
                    print(f"    server: {after['requests'] - before['requests']} requests, batch sizes "
                          f"{' '.join(f'{k}x{v}' for k, v in sorted(hist.items()))} (mean {mean:.2f}), latency ms "
                          f"p50 {after['latency_ms']['p50']} p99 {after['latency_ms']['p99']} (server lifetime)")
                if not same:
                    raise SystemExit(f"remote ({name}) and local results differ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 tasks x 4 episodes; W = 1, 2")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--peers", action="store_true", help="also openpi-server's and vla-eval's own servers "
                        "(needs .venv-openpi)")
    parser.add_argument("--lerobot", action="store_true", help="also the ACT workload (needs .venv-lerobot)")
    parser.add_argument("--act-steps", type=int, default=60)
    parser.add_argument("--act-episodes", type=int, default=4)
    args = parser.parse_args()
    tasks, episodes, widths = (2, 4, [1, 2]) if args.quick else (args.tasks, args.episodes, [1, 2, 4])
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        sets = [f"env.task={','.join(EASY_TASKS[:tasks])}", f"eval.n_episodes={episodes}", "eval.videos=0"]
        compare(f"Meta-World scripted experts, state only: {tasks} tasks x {episodes} episodes",
                "specs/metaworld.yaml", [*sets, "policy.type=scripted"], widths, local_python=sys.executable,
                client_python=sys.executable, server_python=sys.executable, tmp=tmp / "a", peers=args.peers)
        if args.lerobot:
            policy = tmp / "act"
            subprocess.run([str(LEROBOT_PYTHON), "-c", "import sys; sys.path.insert(0, 'tests/lerobot'); "
                            "from make_random_policy import build_random_act; build_random_act(sys.argv[1])",
                            str(policy)], cwd=REPO, check=True, timeout=600)
            act = [f"policy.path={policy}", "policy.rename_map={}", "policy.empty_cameras=0", "policy.device=cpu",
                   "env.task=push-v3", f"env.max_steps={args.act_steps}", f"eval.n_episodes={args.act_episodes}",
                   "eval.videos=0"]
            compare(f"random-init ACT, 480x480 camera, push-v3: {args.act_episodes} episodes x {args.act_steps} "
                    "steps", "specs/metaworld.yaml", act, [2], local_python=str(LEROBOT_PYTHON),
                    client_python=sys.executable, server_python=str(LEROBOT_PYTHON), tmp=tmp / "b")


if __name__ == "__main__":
    main()
