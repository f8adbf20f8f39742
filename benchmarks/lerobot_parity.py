"""Wall time of `lerobot-eval` vs `runner run` on the same Meta-World evaluation, and their per-episode numbers.

Builds the seeded random-init ACT policy of tests/lerobot (into a temporary directory), then for each batch
size B runs B episodes of metaworld-push-v3 (seeds 1000...) on CPU with each tool, one run at a time, and
prints both wall times (whole command: imports, env and policy loading, rollouts, outputs), the ratio and
the episodes. LeRobot always renders a video frame per step in addition to the observation; runner renders
only what the policy reads (no videos here). Results of a run on this machine: benchmarks/lerobot_parity.md.

    .ci/setup-lerobot.sh
    .venv-lerobot/bin/python benchmarks/lerobot_parity.py [--batch-sizes 1 2] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))  # helpers, which lerobot_testlib imports
sys.path.insert(0, str(HERE.parent / "tests" / "lerobot"))

from lerobot_testlib import run_lerobot_eval, run_runner  # noqa: E402
from make_random_policy import build_random_act  # noqa: E402

TASK, SEED = "metaworld-push-v3", 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2], metavar="B")
    parser.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    args = parser.parse_args(argv)

    rows = []
    with tempfile.TemporaryDirectory(prefix="lerobot-parity-") as tmp:
        root = Path(tmp)
        policy = build_random_act(root / "policy")
        for b in args.batch_sizes:
            theirs = run_lerobot_eval(policy, root / f"lerobot_b{b}", task=TASK, seed=SEED, batch_size=b,
                                      n_episodes=b)
            ours = run_runner(policy, root / f"runner_b{b}", task=TASK, seed=SEED, batch_size=b, n_episodes=b)
            rows.append({"batch_size": b, "n_episodes": b, "lerobot_eval": theirs, "runner": ours,
                         "speedup": theirs["wall_s"] / ours["wall_s"]})

    print(f"{TASK}, CPU, seeds from {SEED}, random-init ACT (chunk 10)")
    print(f"{'batch':>5} {'episodes':>8} {'lerobot-eval s':>15} {'runner s':>9} {'speedup':>8}  "
          "per-episode (sum, max, success)")
    for row in rows:
        lr, rr = row["lerobot_eval"], row["runner"]
        print(f"{row['batch_size']:>5} {row['n_episodes']:>8} {lr['wall_s']:>15.1f} {rr['wall_s']:>9.1f} "
              f"{row['speedup']:>7.2f}x")
        for k, (a, b) in enumerate(zip(lr["episodes"], rr["episodes"], strict=True)):
            print(f"{'':>42}  ep {k} lerobot-eval {a['sum_reward']!r} {a['max_reward']!r} {a['success']}")
            print(f"{'':>42}  ep {k} runner       {b['sum_reward']!r} {b['max_reward']!r} {b['success']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
