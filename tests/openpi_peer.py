"""The other end of runner's wire format, built on openpi's own client library (`openpi_client`, PyPI's
openpi-client installed with --no-deps into .venv-openpi by .ci/setup-openpi.sh). Run by tests/test_remote_openpi.py
with that venv's Python; `chunk_for` is imported by runner's test policies too (NumPy only).

  serve  --port-file F --log F [--horizon H] [--action-dim D] [--metadata JSON]
         a policy server in the shape of openpi's WebsocketPolicyServer (metadata on connect, with JSON's keys added;
         then msgpack_numpy request -> reply; the traceback as a text frame and close 1011 when the policy raises;
         GET /healthz); its policy answers {"actions": chunk_for(state, H, D)} and logs each request's keys, shapes
         and prompt
  client --url U --seed S --steps N
         openpi's WebsocketClientPolicy against `runner serve`: episode_start, N observations; prints the actions
  resize --input A.npy --output B.npy --height H --width W
         openpi's image_tools.resize_with_pad of a uint8 HWC image
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

STATE_KEY = "observation/state"


def chunk_for(state: np.ndarray, horizon: int, action_dim: int) -> np.ndarray:
    """A deterministic chunk (horizon, action_dim) in [-1, 1] from a state vector."""
    base = float(np.sum(np.asarray(state, dtype=np.float64)))
    steps = np.arange(horizon, dtype=np.float64)[:, None] + np.arange(action_dim, dtype=np.float64)[None, :]
    return np.sin(base + 0.3 * steps).astype(np.float32)


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
    p = sub.add_parser("client")
    p.add_argument("--url", required=True)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--steps", type=int, default=5)
    p = sub.add_parser("resize")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--height", type=int, required=True)
    p.add_argument("--width", type=int, required=True)
    args = parser.parse_args()
    {"serve": serve, "client": client, "resize": resize}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
