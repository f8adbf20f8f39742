"""`runner serve`: serve a spec's policy over WebSocket (openpi's wire format) with dynamic batching."""

from __future__ import annotations

import argparse

from runner.cli.common import HelpFormatter, add_set_option

DESCRIPTION = """\
Serve the spec's policy (lerobot, scripted, random, python, ...) over WebSocket in openpi's wire format
(msgpack maps, NumPy arrays as openpi's msgpack_numpy encodes them), so that runner on other machines
(policy.type: remote), openpi's websocket client, or your own code can ask it for actions. Only the spec's
`policy` section (and `eval.seed`, for clients that send no episode_start) is used; nothing of the env runs here.

Each connection is one slot of the policy with its own episode state (action queues, seeded RNG): runner's
client sends an episode_start control message with the episode's seed and task, so an episode served here
equals the same episode run locally. Requests arriving from several connections within --max-wait-ms are
stacked into one batched policy call of at most --max-batch rows.

The server binds to 127.0.0.1 by default. Binding to another address needs --api-key-env NAME (clients send
"Authorization: Api-Key <key>") unless --insecure. GET /healthz answers 200; GET /stats gives the counters
(requests, batch sizes, latency percentiles) as JSON. Every --log-every seconds a line says requests/s, the
batch-size histogram and latency percentiles. A malformed request gets a text frame with the reason and its
connection closes; the server serves on. SIGTERM / Ctrl-C: requests in flight are answered, every connection is
closed, exit 0. Protocol and examples: docs/remote-policies.md.

Then, on this or another machine:
  runner run SPEC --set policy.type=remote --set policy.url=ws://HOST:8000 [--set policy.kwargs.api_key_env=NAME]

examples:
  runner serve specs/metaworld.yaml --set policy.type=scripted --port 8000
  runner serve specs/libero.yaml --set policy.path=/models/smolvla_libero --host 0.0.0.0 --api-key-env RUNNER_API_KEY
  runner serve specs/metaworld.yaml --set policy.type=random --port 0 --max-batch 16 --max-wait-ms 2
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("serve", help="serve a spec's policy over WebSocket (for remote evaluation)",
                            description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("spec", metavar="SPEC", help="the spec whose policy to serve")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000, openpi's; 0: any free port)")
    parser.add_argument("--max-batch", type=int, default=8, metavar="N",
                        help="most observations in one batched policy call (default 8)")
    parser.add_argument("--max-wait-ms", type=float, default=5.0, metavar="MS",
                        help="how long a request may wait for others to join its batch (default 5); a batch goes "
                             "at once when every connection in an episode has a request waiting")
    parser.add_argument("--api-key-env", default=None, metavar="NAME",
                        help="environment variable holding the API key clients must send (never the key itself)")
    parser.add_argument("--insecure", action="store_true",
                        help="allow a non-loopback --host without an API key")
    parser.add_argument("--max-message-mb", type=float, default=64.0, metavar="MB",
                        help="largest request accepted (default 64); a larger one closes its connection (1009)")
    parser.add_argument("--max-connections", type=int, default=256, metavar="N",
                        help="connections at once (default 256); more are refused with HTTP 503")
    parser.add_argument("--log-every", type=float, default=10.0, metavar="SECONDS", dest="log_every_s",
                        help="seconds between statistics lines on stderr (default 10; 0: none)")
    add_set_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runner.serve.server import ServeOptions, serve
    from runner.spec import load_spec

    options = ServeOptions(host=args.host, port=args.port, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                           api_key_env=args.api_key_env, insecure=args.insecure, max_message_mb=args.max_message_mb,
                           max_connections=args.max_connections, log_every_s=args.log_every_s)
    spec = load_spec(args.spec, args.overrides)
    serve(spec, options)
    return 0
