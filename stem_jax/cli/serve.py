"""``stem-jax serve``: open one engine, warm it for the largest batch, then serve it over HTTP (stem_jax/serve/)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import socket
import threading
import time
from pathlib import Path

from stem_jax.cli.args import (
    ValuedFlag,
    add_valued_flags,
    command_parser,
    config_from_args,
    non_negative_int,
    positive_int,
)
from stem_jax.cli.commands import method_options
from stem_jax.cli.engine_args import open_engine
from stem_jax.cli.gnn import add_guidance_flags
from stem_jax.cli.planning import add_planner_flags
from stem_jax.errors import StemError

# the choices of --warm-up (stem_jax.serve.warm.WARM_UP_MODES; not imported: the serve extra is optional)
WARM_UP_MODES = ("staged", "full", "none")


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of milliseconds, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 0..65535, got {value}")
    return value


# Where the server listens, and its batching and queueing limits
SERVE_FLAGS: tuple[ValuedFlag, ...] = (
    ("--host", str, "127.0.0.1", "address to bind (default 127.0.0.1: this machine only)"),
    ("--port", _port, 8000, "port (default 8000; 0 picks a free one)"),
    ("--max-batch", positive_int, 32, "most questions per engine call (default 32; 1 turns batching off)"),
    ("--max-wait-ms", _non_negative, 5.0, "longest a question waits for others to join its batch (default 5 ms)"),
    ("--queue-size", positive_int, 256,
     "questions admitted and waiting at most; more are refused with 503 + Retry-After (default 256)"),
    ("--keep-prepared", non_negative_int, 4096, "questions whose prepared runs (plans, grounding, guidance) are "
     "kept, so asking one again only traces it (default 4096; 0 prepares every request afresh)"),
)


def add_serve_parser(sub, add_method_flags) -> None:
    p = command_parser(
        sub, "serve", help="HTTP JSON API over one warmed engine, with dynamic batching and Prometheus metrics",
        description="Open the dataset's engine once, compile the shapes a request can reach (--warm-up), "
        "then serve POST /v1/ask, POST /v1/retrieve, GET /healthz, /v1/info, /metrics, "
        "/docs (OpenAPI) and the evidence explorer at /. Concurrent questions are gathered for at most "
        "--max-wait-ms or --max-batch questions and answered by one engine call. Needs the serve extra: "
        "pip install 'stem-jax[serve]'.")
    add_planner_flags(p, default="pattern")
    add_guidance_flags(p)
    add_method_flags(p)
    add_valued_flags(p, SERVE_FLAGS)
    p.add_argument("--warm-up", dest="warm_up", choices=WARM_UP_MODES, default="staged",
                   help="staged (default): before serving, compile what a one-question request reaches and answer one "
                   "question of the split; compile the larger batches' shapes while serving (GET /healthz says "
                   "ready when done; until then a request may compile a shape). full: compile every shape a "
                   "--max-batch batch reaches before serving, so that no request compiles. none: compile nothing "
                   "ahead (requests compile what they need)")
    p.add_argument("--no-warm-up", dest="warm_up", action="store_const", const="none",
                   help="the same as --warm-up none")
    p.add_argument("--log-level", dest="log_level", default="info",
                   choices=("critical", "error", "warning", "info", "debug"), help="uvicorn's log level")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from stem_jax.serve import create_app
        from stem_jax.serve.warm import ServerWarmUp
    except ImportError as err:
        raise StemError(f"stem-jax serve needs FastAPI and uvicorn ({err})\n"
                        "  how to fix: pip install 'stem-jax[serve]'") from None
    config = config_from_args(args)
    engine = open_engine(args, config, method_options=method_options(args))
    warm = ServerWarmUp(engine, args.max_batch, mode=args.warm_up, method=args.method,
                        log=lambda line: print(line, flush=True))
    if args.warm_up != "none":
        began = time.perf_counter()
        if args.warm_up == "full":
            print(f"warming up for batches of up to {args.max_batch} questions (compiling every shape a request can "
                  "reach, so that no request compiles; --warm-up staged serves sooner) ...", flush=True)
        else:
            print("warming up for one question (the shapes of larger batches compile after the server starts; "
                  "--warm-up full compiles them first) ...", flush=True)
        with _heartbeat(began):
            warm.before_serving()
        print(f"warm-up done in {time.perf_counter() - began:.1f}s", flush=True)
    app = create_app(engine, method=args.method, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                     queue_size=args.queue_size, warm_up=warm, keep_prepared=args.keep_prepared)
    sock = _bind(args.host, args.port)  # bound here, so that --port 0 prints the port it got
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"serving {engine.dataset.name} ({args.method}, planner {engine.planner_spec.name}) on "
          f"http://{shown}:{port}  (docs: /docs, metrics: /metrics; Ctrl-C stops after open requests)",
          flush=True)
    # The engine (KG index, dataset, caches) lives as long as the service: in the collector's permanent
    # generation, a full collection no longer walks its hundreds of thousands of objects (each such collection
    # stalled the event loop, and every request waiting on it).
    gc.freeze()
    server = _Server(uvicorn.Config(app, host=host, port=port, log_level=args.log_level))
    server.run(sockets=[sock])  # waits for open requests
    return 0


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server on a socket bound beforehand, logging "Uvicorn running on ..." as it does
        when it binds itself (it stays silent for given sockets)."""

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            if sockets and not self.should_exit:
                self._log_started_message(sockets)

    return Server


def _Server(config):  # noqa: N802 (a class, built on first use: uvicorn is an optional dependency)
    return _server_class()(config)


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port), as uvicorn would bind it."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as err:
        raise StemError(f"cannot listen on {host}:{port} ({err.strerror or err})\n  how to fix: pass another "
                        "--port (0 picks a free one) or --host") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


@contextlib.contextmanager
def _heartbeat(began: float, every_s: float = 20.0):
    """Print a line every ``every_s`` seconds while a long step (a compile) runs, so it does not look stuck."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            print(f"  ... still compiling ({time.perf_counter() - began:.0f}s so far)", flush=True)

    thread = threading.Thread(target=beat, name="stem-serve-warm-up-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated requests/s, got {text!r}") from None
    if not rates or any(not r > 0 for r in rates):
        raise argparse.ArgumentTypeError(f"expected positive requests/s such as 5,20,50, got {text!r}")
    return rates


def add_bench_serve_parser(bench_sub) -> None:
    p = bench_sub.add_parser(
        "serve", help="open-loop load against a running `stem-jax serve` (latency percentiles vs offered rate)",
        description="Send /v1/ask requests at Poisson arrival times for each offered rate against a server on this "
        "machine; report p50/p95/p99 latency, achieved throughput, errors and the server's batch sizes. Runs with "
        "different --label (e.g. the --max-batch 1 baseline and a batched server) are merged into one "
        "bench-serve-<dataset>.json/.md/.png.")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the server (127.0.0.1/localhost only)")
    p.add_argument("--rates", type=_rates, default=(2.0, 5.0, 10.0, 20.0, 50.0),
                   help="offered requests/s, comma-separated (default 2,5,10,20,50)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of load per rate (default 10)")
    p.add_argument("--questions", type=positive_int, default=64, help="split questions to cycle through (default 64)")
    p.add_argument("--by", choices=("qid", "text"), default="qid",
                   help="send split question ids (any planner, oracle included) or their bracketed text")
    p.add_argument("--max-outstanding", dest="max_outstanding", type=positive_int, default=512,
                   help="requests in flight at most; sends beyond are counted as dropped (default 512)")
    p.add_argument("--warm", type=int, default=16, help="questions answered once, untimed, before the load (default 16)")
    p.add_argument("--repeat", action="store_true",
                   help="timed requests cycle through the --warm questions (each answered before, as `ask --warm` "
                   "times); default: fresh questions, never sent before")
    p.add_argument("--label", default=None, help="row label (default max-batch-<server's max batch>)")
    p.add_argument("--out", type=Path, default=None, help="where to write results (default runs/bench)")
    p.add_argument("--record", action="store_true", help="write into experiments/results/ instead of --out")
    p.set_defaults(func=cmd_bench_serve)


def cmd_bench_serve(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from stem_jax.cli.report import markdown_table, run_metadata
    from stem_jax.serve.bench import plot, run_load, table

    result = asyncio.run(run_load(args.url, args.rates, duration=args.duration, questions=args.questions,
                                  by=args.by, max_outstanding=args.max_outstanding, warm=args.warm,
                                  repeat=args.repeat))
    server = result["server"]
    label = args.label or f"max-batch-{server['serve']['max_batch']}"
    headers, rows = table(result["rows"])
    print(f"{label}: {server['dataset']} ({server['method']}, planner {server['planner']['name']}), "
          f"max_wait_ms {server['serve']['max_wait_ms']}")
    print(markdown_table(headers, rows))
    out = Path("experiments/results") if args.record else (args.out or Path("runs/bench"))
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"bench-serve-{server['dataset']}"
    payload: dict = {"runs": {}}
    if stem.with_suffix(".json").is_file():
        payload = json.loads(stem.with_suffix(".json").read_text())
    payload["runs"][label] = {"meta": run_metadata(), "command": "stem-jax " + " ".join(args.argv),
                              "server": {k: server[k] for k in ("dataset", "split", "method", "planner", "guidance",
                                                                "encoder", "serve", "versions", "kg")},
                              "by": args.by, "duration_s": args.duration, "rows": result["rows"]}
    stem.with_suffix(".json").write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    parts = [f"# bench serve: {server['dataset']}\n",
             "Open-loop Poisson load on 127.0.0.1; latency is end to end per successful request; batches and "
             "mean batch are read from the server's /metrics over each rate's window.\n"]
    for name, run in payload["runs"].items():
        s = run["server"]
        parts.append(f"## {name}\n\n`{run['command']}` against a server with max_batch {s['serve']['max_batch']}, "
                     f"max_wait_ms {s['serve']['max_wait_ms']}, planner {s['planner']['name']}, encoder "
                     f"{s['encoder']}, machine {run['meta'].get('machine', run['meta'].get('platform', '?'))}\n")
        parts.append(markdown_table(*table(run["rows"])) + "\n")
    stem.with_suffix(".md").write_text("\n".join(parts))
    plot({name: run["rows"] for name, run in payload["runs"].items()}, stem.with_suffix(".png"))
    print(f"wrote {stem}.json, .md and .png")
    return 0
