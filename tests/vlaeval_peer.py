"""The other end of vla-eval's protocol, built on allenai's vla-evaluation-harness itself (PyPI's vla-eval, installed
into .venv-openpi by .ci/setup-openpi.sh, which also sees the core venv's runner and Meta-World). Run by
tests/test_remote_vlaeval.py with that venv's Python.

  serve --port-file F --log F [--action-dim D]
        a PredictModelServer subclass served by vla-eval's own serve_async (HELLO with its action and observation
        specs, EPISODE_START / OBSERVATION -> ACTION / EPISODE_END, GET /health): the action of runner's Meta-World
        scripted expert of the episode's task (EPISODE_START's task name) for the 39-number environment_state;
        declares D action numbers (default 4, Meta-World's: position and gripper); logs every message it gets
        (HELLO and the encodings its images came in, raw, png or jpeg, as vla-eval's msgpack object hook sees them)
  drive --url U --task T --episodes N --seed S --max-steps M [--images] [--benchmark B]
        vla-eval's own Connection drives `runner serve --protocol vla-eval` through whole Meta-World episodes built
        here (runner's Meta-World env; episode k reset with seed S + k), observations in vla-eval's layout
        (task_description, state = agent_pos, environment_state, with --images images: {"corner2": ...} encoded
        as vla-eval encodes images by default); each step's action is compared with the expert's computed here;
        prints one JSON line per episode
  error --url U
        vla-eval's Connection: an episode of a task that does not exist, then one of reach-v3 on the same
        connection; prints what each episode's act() returned or raised
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading

import numpy as np
from openpi_peer import Experts, jsonable, resolve_task, summary

IMAGE_SIZE = 64  # --images: small renders, cheap in software GL


def serve(args: argparse.Namespace) -> None:
    import signal

    import anyio
    from vla_eval.model_servers.predict import PredictModelServer
    from vla_eval.model_servers.serve import serve_async
    from vla_eval.protocol import messages
    from vla_eval.specs import GRIPPER_RAW, POSITION_DELTA, ROTATION_AA, DimSpec

    class ScriptedExpertServer(PredictModelServer):
        """Meta-World's scripted expert of each episode's task (the task EPISODE_START names)."""

        def __init__(self, action_dim: int, log_path: str) -> None:
            super().__init__()
            self.action_dim = action_dim
            self.log = open(log_path, "a", buffering=1)  # noqa: SIM115 - one line per message while serving
            self.lock = threading.Lock()  # predict() runs on a worker thread
            self.tasks: dict[str, dict] = {}  # session -> its episode's task
            self.experts = Experts()
            self.image_formats: dict[str, int] = {}  # images as they came over the wire: format -> count

        def write(self, entry: dict) -> None:
            with self.lock:
                self.log.write(json.dumps(jsonable(entry)) + "\n")

        async def on_episode_start(self, config: dict, ctx) -> None:
            await super().on_episode_start(config, ctx)
            self.tasks[ctx.session_id] = dict(config.get("task") or {})
            self.write({"message": "episode_start", "payload": config})

        async def on_episode_end(self, result: dict, ctx) -> None:
            await super().on_episode_end(result, ctx)
            self.tasks.pop(ctx.session_id, None)
            self.write({"message": "episode_end", "payload": result})

        def predict(self, obs: dict, ctx) -> dict:
            task = self.tasks.get(ctx.session_id) or {}
            name = resolve_task(str(task.get("name") or obs.get("task_description")))
            images = obs.get("images") or {}
            self.write({"message": "observation", "step": ctx.step, "task": name,
                        "task_description": obs.get("task_description"), **summary(obs),
                        "image_formats": dict(self.image_formats),
                        "image_mean": float(np.mean([np.mean(v) for v in images.values()])) if images else None})
            return {"actions": self.experts.action(name, obs["environment_state"])}

        def get_action_spec(self) -> dict[str, DimSpec]:
            if self.action_dim == 4:  # Meta-World's: hand xyz deltas, gripper effort
                return {"position": POSITION_DELTA, "gripper": DimSpec("gripper", 1, "raw", (-1, 1))}
            if self.action_dim == 7:  # what a LIBERO policy returns
                return {"position": POSITION_DELTA, "rotation": ROTATION_AA, "gripper": GRIPPER_RAW}
            return {"action": DimSpec("action", self.action_dim, "raw")}

        def get_observation_spec(self) -> dict[str, DimSpec]:
            return {"environment_state": DimSpec("environment_state", 39, "metaworld_state",
                                                 description="Meta-World's raw 39-number observation")}

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(levelname)s: %(message)s")
    server = ScriptedExpertServer(args.action_dim, args.log)
    decode = messages.decode_ndarray

    def watching(obj: object) -> object:  # msgpack's object hook of vla-eval's unpack_message: every map decoded
        if isinstance(obj, dict) and obj.get("__image__"):
            with server.lock:
                encoding = str(obj.get("format"))
                server.image_formats[encoding] = server.image_formats.get(encoding, 0) + 1
        if isinstance(obj, dict) and obj.get("type") == "hello" and "seq" in obj:  # the message, not in the server
            server.write({"message": "hello", "seq": obj["seq"], "payload": obj.get("payload")})
        return decode(obj)

    messages.decode_ndarray = watching  # only watches: the encodings of the images that arrive, HELLO's payload

    async def main() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tg:
                port = await tg.start(serve_async, server, "127.0.0.1", 0)
                with open(args.port_file, "w") as f:
                    f.write(str(port))
                async for _ in signals:
                    break
                tg.cancel_scope.cancel()

    anyio.run(main)


class SeqMismatches(logging.Handler):
    """vla-eval's Connection.act compares each ACTION's seq with its OBSERVATION's and logs a warning if they
    differ: counted here."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "Seq mismatch" in record.getMessage():
            self.count += 1


def drive(args: argparse.Namespace) -> None:
    import anyio

    anyio.run(_drive, args)


async def _drive(args: argparse.Namespace) -> None:
    from vla_eval.connection import Connection

    from runner.envs.metaworld.adapter import KWARGS, MetaWorldEnv
    from runner.envs.metaworld.catalog import METAWORLD_TASKS
    from runner.tasks import TaskRef

    mismatches = SeqMismatches()
    logging.getLogger("vla_eval.connection").addHandler(mismatches)
    name = resolve_task(args.task)
    text = METAWORLD_TASKS[name]
    keys = frozenset({"agent_pos", "environment_state", *(["pixels"] if args.images else [])})
    env = MetaWorldEnv(TaskRef(name, 0, name, text),
                       {**KWARGS, "observation_width": IMAGE_SIZE, "observation_height": IMAGE_SIZE}, {}, keys)
    experts = Experts()
    conn = Connection(args.url, timeout=60, max_retries=2, backoff_base=1.0)
    await conn.connect(benchmark=args.benchmark)
    for k in range(args.episodes):
        seed = args.seed + k
        obs, info = env.reset(seed=seed)
        await conn.start_episode({"task": {"name": name, "description": text, "suite": "metaworld",
                                           "episode_idx": k, "seed": seed}})
        diff, shapes, dtypes, steps = 0.0, set(), set(), 0
        for _ in range(args.max_steps):
            payload = {"task_description": text, "state": obs["agent_pos"],
                       "environment_state": obs["environment_state"]}
            if args.images:
                payload["images"] = {"corner2": obs["pixels"]}
            action = np.asarray((await conn.act(payload))["actions"])
            shapes.add(action.shape)
            dtypes.add(str(action.dtype))
            diff = max(diff, float(np.max(np.abs(action - experts.action(name, obs["environment_state"])))))
            obs, _, terminated, truncated, info = env.step(action)
            steps += 1
            if terminated or truncated:
                break
        success = bool(info["is_success"])
        await conn.end_episode({"metrics": {"success": success}, "steps": steps})
        print(json.dumps({"task": name, "seed": seed, "steps": steps, "success": success, "max_abs_diff": diff,
                          "shapes": sorted(map(list, shapes)), "dtypes": sorted(dtypes),
                          "seq_ok": mismatches.count == 0, "server_info": jsonable(conn.server_info)}), flush=True)
    await conn.close()
    env.close()


def error(args: argparse.Namespace) -> None:
    import anyio

    anyio.run(_error, args)


async def _error(args: argparse.Namespace) -> None:
    from vla_eval.connection import Connection

    async def act(observation: dict) -> tuple[dict | None, str | None]:
        try:
            return jsonable(await conn.act(observation)), None
        except RuntimeError as exc:  # vla-eval's Connection on an ERROR message
            return None, str(exc)

    conn = Connection(args.url, timeout=60, max_retries=2, backoff_base=1.0)
    await conn.connect(benchmark="metaworld")
    observation = {"task_description": "fly to the moon", "state": np.zeros(4), "environment_state": np.zeros(39)}
    await conn.start_episode({"task": {"name": "fly-to-the-moon", "description": "fly to the moon",
                                       "episode_idx": 0, "seed": 1000}})
    first, raised = await act(observation)
    await conn.end_episode({"metrics": {"success": False}, "steps": 1})
    await conn.start_episode({"task": {"name": "reach-v3", "description": "Reach a goal position", "episode_idx": 0,
                                       "seed": 1000}})
    then, then_raised = await act({**observation, "task_description": "Reach a goal position"})
    await conn.close()
    print(json.dumps({"first": first, "raised": raised, "then": then, "then_raised": then_raised}))


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--action-dim", type=int, default=4)
    p = sub.add_parser("drive")
    p.add_argument("--url", required=True)
    p.add_argument("--task", required=True)
    p.add_argument("--episodes", type=int, default=1)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--images", action="store_true")
    p.add_argument("--benchmark", default="metaworld", help="HELLO's benchmark")
    p = sub.add_parser("error")
    p.add_argument("--url", required=True)
    args = parser.parse_args()
    {"serve": serve, "drive": drive, "error": error}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
