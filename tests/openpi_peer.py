"""The other end of runner's wire format, built on openpi's own packages (`openpi_client` and `openpi_server`, PyPI's
openpi-client and openpi-server, installed into .venv-openpi by .ci/setup-openpi.sh, which also sees the core venv's
runner and Meta-World). Run by tests/test_remote_openpi.py with that venv's Python; `chunk_for` is imported by
runner's test policies too (NumPy only), `resolve_task`, `Experts` and `summary` by tests/vlaeval_peer.py.

  serve  --port-file F --log F [--horizon H] [--action-dim D] [--metadata JSON]
         a policy server in the shape of openpi's WebsocketPolicyServer (metadata on connect, with JSON's keys added;
         then msgpack_numpy request -> reply; the traceback as a text frame and close 1011 when the policy raises;
         GET /healthz); its policy answers {"actions": chunk_for(state, H, D)} and logs each request's keys, shapes
         and prompt
  serve-scripted --port-file F --log F [--tasks T,T] [--metadata JSON]
         openpi-server's own WebsocketPolicyServer (metadata: JSON, as openpi's serve_policy sends its policy's)
         serving runner's Meta-World scripted experts: {"actions": expert(task).get_action(state)} for a request in
         runner's layout (environment_state, task) or openpi's (observation/state, prompt), the task named by its
         name or text (a text several tasks share is resolved among --tasks); logs each request
  client --url U --seed S --steps N
         openpi's WebsocketClientPolicy against `runner serve`: episode_start, N observations; prints the actions
  client-openpi --url U --prompt P --steps N [--connections C] [--layout runner|libero] [--states A.npy]
                [--horizon H|metadata]
         openpi's WebsocketClientPolicy as openpi's examples use it (no episode_start), C connections one after
         the other, each N requests (state i: row i of A.npy, else zeros), through openpi's ActionChunkBroker
         when --horizon is given; prints the metadata and each connection's actions (or its error)
  resize --input A.npy --output B.npy --height H --width W
         openpi's image_tools.resize_with_pad of a uint8 HWC image
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

STATE_KEY = "observation/state"
LIBERO_IMAGE = (224, 224, 3)  # what openpi's LIBERO example sends, after resize_with_pad


def chunk_for(state: np.ndarray, horizon: int, action_dim: int) -> np.ndarray:
    """A deterministic chunk (horizon, action_dim) in [-1, 1] from a state vector."""
    base = float(np.sum(np.asarray(state, dtype=np.float64)))
    steps = np.arange(horizon, dtype=np.float64)[:, None] + np.arange(action_dim, dtype=np.float64)[None, :]
    return np.sin(base + 0.3 * steps).astype(np.float32)


def resolve_task(text: str, tasks: list[str] | None = None) -> str:
    """The Meta-World task a prompt names: a task's name (with or without `metaworld-`, as runner's Meta-World
    adapter names tasks), else the task whose text it is, among `tasks` (default: all 50)."""
    from runner.envs.metaworld import task_names
    from runner.envs.metaworld.catalog import METAWORLD_TASKS

    named = task_names(text)
    if named is not None and len(named) == 1:
        return named[0]
    matches = [name for name in tasks or METAWORLD_TASKS if METAWORLD_TASKS.get(name) == text]
    if len(matches) != 1:
        raise ValueError(f"{text!r} is the text of several tasks ({', '.join(matches)})" if matches
                         else f"{text!r} names no Meta-World task")
    return matches[0]


class Experts:
    """runner's Meta-World scripted experts (runner.policies.scripted), one per task, built when first asked."""

    def __init__(self) -> None:
        self._experts: dict[str, object] = {}

    def action(self, task: str, state: object) -> np.ndarray:
        from runner.policies.scripted.policy import expert_for

        if task not in self._experts:
            self._experts[task] = expert_for(task)
        return self._experts[task].get_action(np.array(state))  # a copy: openpi decodes read-only arrays


def summary(obs: dict) -> dict:
    """A request's keys (a nested map's as `outer.inner`), and the shapes and dtypes of its arrays."""
    flat = {}
    for key, value in obs.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{inner}": v for inner, v in value.items()})
        else:
            flat[key] = value
    arrays = {k: v for k, v in flat.items() if isinstance(v, np.ndarray)}
    return {"keys": sorted(flat), "shapes": {k: list(v.shape) for k, v in arrays.items()},
            "dtypes": {k: str(v.dtype) for k, v in arrays.items()},
            "types": {k: type(v).__name__ for k, v in flat.items() if not isinstance(v, np.ndarray)}}


def jsonable(value: object) -> object:
    """Metadata and payloads as JSON: arrays and NumPy scalars as lists and numbers, bytes as text."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


def serve(args: argparse.Namespace) -> None:
    import asyncio
    import http
    import signal
    import traceback

    import websockets.asyncio.server
    import websockets.frames
    from openpi_client import msgpack_numpy

    log = open(args.log, "a", buffering=1)  # noqa: SIM115 - one line per request, kept open while serving

    def infer(obs: dict) -> dict:
        state = obs[STATE_KEY]  # KeyError for a request without it, as a real policy's input transform raises
        log.write(json.dumps({"keys": sorted(obs), "shapes": {k: list(np.shape(v)) for k, v in obs.items()
                                                               if isinstance(v, np.ndarray)},
                              "dtypes": {k: str(v.dtype) for k, v in obs.items() if isinstance(v, np.ndarray)},
                              "prompt": obs.get("prompt")}) + "\n")
        return {"actions": chunk_for(state, args.horizon, args.action_dim)}

    async def handler(websocket) -> None:
        packer = msgpack_numpy.Packer()
        await websocket.send(packer.pack({"policy": "openpi-peer", **json.loads(args.metadata)}))
        while True:
            try:
                obs = msgpack_numpy.unpackb(await websocket.recv())
                await websocket.send(packer.pack(infer(obs)))
            except websockets.ConnectionClosed:
                break
            except Exception:
                await websocket.send(traceback.format_exc())
                await websocket.close(code=websockets.frames.CloseCode.INTERNAL_ERROR,
                                      reason="Internal server error. Traceback included in previous frame.")
                break

    def health(connection, request):
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        return None

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with websockets.asyncio.server.serve(handler, "127.0.0.1", 0, compression=None, max_size=None,
                                                   process_request=health) as server:
            with open(args.port_file, "w") as f:
                f.write(str(server.sockets[0].getsockname()[1]))
            await stop.wait()

    asyncio.run(main())


def serve_scripted(args: argparse.Namespace) -> None:
    import asyncio

    from openpi_client import base_policy
    from openpi_server import WebsocketPolicyServer

    log = open(args.log, "a", buffering=1)  # noqa: SIM115 - one line per request, kept open while serving
    tasks = args.tasks.split(",") if args.tasks else None
    experts = Experts()

    class ScriptedExperts(base_policy.BasePolicy):
        """Meta-World's expert of the request's task, on its 39-number state."""

        def infer(self, obs: dict) -> dict:
            if STATE_KEY in obs:  # openpi's keys
                state, text = obs[STATE_KEY], obs["prompt"]
            else:  # runner's layout
                state, text = obs["environment_state"], obs["task"]
            task = resolve_task(str(text), tasks)
            log.write(json.dumps({**summary(obs), "prompt": str(text), "task": task}) + "\n")
            return {"actions": experts.action(task, state)}

    metadata = json.loads(args.metadata)
    asyncio.run(serve_until_sigterm(lambda port: WebsocketPolicyServer(ScriptedExperts(), host="127.0.0.1", port=port,
                                                                       metadata=metadata), args.port_file))


async def serve_until_sigterm(make_server, port_file: str, attempts: int = 5) -> None:
    """`make_server(port).run()` on a free port (openpi's server reports no bound port: one is picked, and picked
    again if taken meanwhile); the port is written once GET /healthz answers; runs until SIGTERM."""
    import asyncio
    import signal
    import socket
    import urllib.request

    def healthy(port: int) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    for attempt in range(attempts):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        task = asyncio.create_task(make_server(port).run())
        while not task.done() and not await asyncio.to_thread(healthy, port):
            await asyncio.sleep(0.05)
        if task.done():
            if isinstance(task.exception(), OSError) and attempt + 1 < attempts:
                continue  # the port was taken between the probe and the bind
            task.result()
        with open(port_file, "w") as f:
            f.write(str(port))
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return


def observation(layout: str, state: np.ndarray, prompt: str, step: int) -> dict:
    """One request: runner's layout, or openpi's LIBERO example's (two images, the state, the prompt; with a NumPy
    scalar under a key a server's mapping does not name)."""
    if layout == "runner":
        return {"environment_state": state, "agent_pos": state[:4], "task": prompt}
    image = np.full(LIBERO_IMAGE, step % 256, dtype=np.uint8)
    return {"observation/image": image, "observation/wrist_image": image[::-1].copy(),
            "observation/state": state[:4], "prompt": prompt, "observation/step": np.int64(step)}


def client_openpi(args: argparse.Namespace) -> None:
    from openpi_client import action_chunk_broker, websocket_client_policy

    states = np.load(args.states) if args.states else np.zeros((args.steps, 39))
    metadata, connections = None, []
    for _ in range(args.connections):
        client = websocket_client_policy.WebsocketClientPolicy(host=args.url)
        metadata = client.get_server_metadata()
        policy = client
        if args.horizon:
            horizon = metadata["action_horizon"] if args.horizon == "metadata" else int(args.horizon)
            policy = action_chunk_broker.ActionChunkBroker(client, action_horizon=horizon)
        actions, error = [], None
        for step in range(args.steps):
            try:
                reply = policy.infer(observation(args.layout, states[step], args.prompt, step))
            except RuntimeError as exc:  # the server's text frame
                error = str(exc)
                break
            actions.append(np.asarray(reply["actions"]).tolist())
        client._ws.close()  # openpi's client has no close(): its socket, as a finished example's process would
        connections.append({"actions": actions, "error": error})
    print(json.dumps({"metadata": jsonable(metadata), "connections": connections}))


def client(args: argparse.Namespace) -> None:
    from openpi_client import websocket_client_policy

    policy = websocket_client_policy.WebsocketClientPolicy(host=args.url)
    metadata = policy.get_server_metadata()
    box = {"type": "Box", "low": np.full(4, -1.0, np.float32), "high": np.full(4, 1.0, np.float32), "dtype": "<f4"}
    ack = policy.infer({"__ctrl__": "episode_start", "__task__": "push-v3", "__seed__": args.seed,
                        "__episode_index__": 0, "__action_space__": box})
    actions = [policy.infer({"environment_state": np.zeros(39), "task": "push the puck"})["actions"].tolist()
               for _ in range(args.steps)]
    print(json.dumps({"metadata": {k: v for k, v in metadata.items() if isinstance(v, (str, bool, int))},
                      "ack": ack, "actions": actions}))


def resize(args: argparse.Namespace) -> None:
    from openpi_client import image_tools

    image = np.load(args.input)
    np.save(args.output, image_tools.resize_with_pad(image, args.height, args.width))


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--horizon", type=int, default=10)
    p.add_argument("--action-dim", type=int, default=4)
    p.add_argument("--metadata", default="{}", help="more metadata keys (JSON), e.g. a contract")
    p = sub.add_parser("serve-scripted")
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--tasks", default=None, help="comma list: the tasks a text shared by several may name")
    p.add_argument("--metadata", default="{}", help="the metadata (JSON), as openpi's serve_policy sends its policy's")
    p = sub.add_parser("client")
    p.add_argument("--url", required=True)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--steps", type=int, default=5)
    p = sub.add_parser("client-openpi")
    p.add_argument("--url", required=True)
    p.add_argument("--prompt", required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--connections", type=int, default=1)
    p.add_argument("--layout", choices=("runner", "libero"), default="runner")
    p.add_argument("--states", default=None, help=".npy of (steps, 39) states")
    p.add_argument("--horizon", default=None, help="ActionChunkBroker's horizon: a number, or metadata")
    p = sub.add_parser("resize")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--height", type=int, required=True)
    p.add_argument("--width", type=int, required=True)
    args = parser.parse_args()
    modes = {"serve": serve, "serve-scripted": serve_scripted, "client": client, "client-openpi": client_openpi,
             "resize": resize}
    modes[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
