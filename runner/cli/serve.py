"""`runner serve`: serve a spec's policy over WebSocket (openpi's or vla-eval's protocol) with dynamic batching."""

from __future__ import annotations

import argparse

from runner.cli.common import HelpFormatter, add_set_option

DESCRIPTION = """\
Serve the spec's policy (lerobot, scripted, random, python, ...) over WebSocket, so that runner on other
machines (policy.type: remote), openpi's websocket client, vla-eval's benchmarks, or your own code can ask it
for actions. --protocol openpi (default): msgpack maps, NumPy arrays as openpi's msgpack_numpy encodes them;
--protocol vla-eval: vla-eval's envelopes (HELLO, OBSERVATION -> ACTION, EPISODE_START / END, ERROR).
Only the spec's `policy` section is used, and `eval.seed` and the env's tasks for clients that send no
runner episode_start.

Each connection is one slot of the policy with its own episode state (action queues, seeded RNG): runner's
client sends the episode's seed and task, so an episode served here equals the same episode run locally.
Other clients get implicit episodes: the n-th one the server starts is seeded eval.seed + n, its task is the
spec's task whose name or text the prompt is, its action space the spec env's when the policy needs one
(random). Requests arriving from several connections within --max-wait-ms are stacked into one batched
policy call of at most --max-batch rows. Each reply carries --action-horizon actions (openpi's default: the
policy's own n_action_steps when it predicts chunks, e.g. ACT; else 1), so openpi's ActionChunkBroker works.

--request maps another request layout onto the policy's inputs, as policy.kwargs.request does on the
client's side (request key -> task, agent_pos, environment_state, pixels or pixels.<camera>), e.g. openpi's
LIBERO keys: {"observation/image": "pixels.image", "observation/state": "agent_pos", "prompt": "task"}; keys
it does not name are ignored. Under vla-eval a dot nests (images.agentview). Without it: runner's layout (pixels,
agent_pos, environment_state, task or prompt), or vla-eval's (images, state, environment_state,
task_description).

The server binds to 127.0.0.1 by default. Binding to another address needs --api-key-env NAME (clients send
"Authorization: Api-Key <key>") unless --insecure. GET /healthz (and vla-eval's /health) answers 200; GET
/stats gives the counters (requests, batch sizes, latency percentiles) as JSON. Every --log-every seconds a
line says requests/s, the batch-size histogram and latency percentiles. A malformed request gets one line with
the reason (openpi: a text frame, then its connection closes; vla-eval: an ERROR message); the server serves
on. SIGTERM / Ctrl-C: requests in flight are answered, every connection is closed, exit 0. Protocol and
examples: docs/remote-policies.md.

Then, on this or another machine:
  runner run SPEC --set policy.type=remote --set policy.url=ws://HOST:8000 [--set policy.kwargs.api_key_env=NAME]

examples:
  runner serve specs/metaworld.yaml --set policy.type=scripted --port 8000
  runner serve specs/libero.yaml --set policy.path=/models/smolvla_libero --host 0.0.0.0 --api-key-env RUNNER_API_KEY
  runner serve specs/metaworld.yaml --set policy.type=random --port 0 --max-batch 16 --max-wait-ms 2
  runner serve specs/libero.yaml --set policy.path=/models/act_libero --action-horizon 10 --request @layout.yaml
  runner serve specs/metaworld.yaml --set policy.type=scripted --protocol vla-eval
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
    parser.add_argument("--protocol", choices=("openpi", "vla-eval"), default="openpi",
                        help="the wire protocol (default openpi)")
    parser.add_argument("--request", default=None, metavar="MAPPING",
                        help="the clients' request layout: a JSON/YAML map of request key -> what it holds (as "
                             "policy.kwargs.request), or @FILE holding one")
    parser.add_argument("--action-horizon", type=int, default=None, metavar="H",
                        help="actions per reply (default: openpi, the policy's own n_action_steps when it predicts "
                             "chunks, else 1; vla-eval, 1)")
    add_set_option(parser)
    parser.set_defaults(func=run)


def request_mapping(text: str | None) -> tuple | None:
    """--request's items (runner.policies.remote.request), checked against policy.kwargs.request's schema."""
    if text is None:
        return None
    import difflib

    import jsonschema
    import yaml

    from runner.errors import ConfigError
    from runner.policies.remote import KWARGS_SCHEMA, request

    source = "--request"
    if text.startswith("@"):
        from pathlib import Path

        path = Path(text[1:])
        try:
            if path.stat().st_size > 1_000_000:
                raise ConfigError(f"--request {text}: over 1 MB")
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--request: cannot read {path}: {exc.strerror or exc}") from None
        source = f"--request {path}"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not JSON or YAML"
        raise ConfigError(f"{source}: {problem}{where} (a JSON or YAML map of request key -> source)") from None
    schema = KWARGS_SCHEMA["properties"]["request"]
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path)
        what = error.message[:300]
        if isinstance(error.instance, str):
            close = difflib.get_close_matches(error.instance.partition(".")[0], request.SOURCES, n=1)
            what = f"{error.instance[:100]!r} is not valid" + (f"; did you mean {close[0]}?" if close else "")
        raise ConfigError(f"{source}: {where + ': ' if where else ''}{what} (a map of request key -> task, agent_pos, "
                          "environment_state, pixels or pixels.<camera>)")
    return request.parse(data)


def run(args: argparse.Namespace) -> int:
    from runner.serve.server import ServeOptions, serve
    from runner.spec import load_spec

    options = ServeOptions(host=args.host, port=args.port, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                           api_key_env=args.api_key_env, insecure=args.insecure, max_message_mb=args.max_message_mb,
                           max_connections=args.max_connections, log_every_s=args.log_every_s,
                           protocol=args.protocol, request=request_mapping(args.request),
                           action_horizon=args.action_horizon)
    spec = load_spec(args.spec, args.overrides)
    serve(spec, options)
    return 0
