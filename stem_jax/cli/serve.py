"""``stem-jax serve``: open one engine, warm it for the largest batch, then serve it over HTTP (stem_jax/serve/)."""

from __future__ import annotations

import argparse
import time

from stem_jax.cli.args import config_from_args, positive_int
from stem_jax.cli.commands import method_options
from stem_jax.cli.engine_args import open_engine
from stem_jax.errors import StemError


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


def add_serve_parser(sub, add_dataset_flags, add_cache_flags, add_config_flags, add_planner_flags,
                     add_guidance_flags, add_method_flags) -> None:
    p = sub.add_parser(
        "serve", help="HTTP JSON API over one warmed engine, with dynamic batching and Prometheus metrics",
        description="Open the dataset's engine once, compile the shapes a batch of --max-batch questions can reach "
        "(Engine.warm_up), then serve POST /v1/ask, POST /v1/retrieve, GET /healthz, /v1/info, /metrics, "
        "/docs (OpenAPI) and the evidence explorer at /. Concurrent questions are gathered for at most "
        "--max-wait-ms or --max-batch questions and answered by one engine call. Needs the serve extra: "
        "pip install 'stem-jax[serve]'.")
    add_dataset_flags(p)
    add_cache_flags(p)
    add_config_flags(p)
    add_planner_flags(p, default="pattern")
    add_guidance_flags(p)
    add_method_flags(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_port, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--max-batch", dest="max_batch", type=positive_int, default=32,
                   help="most questions per engine call (default 32; 1 turns batching off)")
    p.add_argument("--max-wait-ms", dest="max_wait_ms", type=_non_negative, default=5.0,
                   help="longest a question waits for others to join its batch (default 5 ms)")
    p.add_argument("--queue-size", dest="queue_size", type=positive_int, default=256,
                   help="questions admitted and waiting at most; more are refused with 503 + Retry-After (default 256)")
    p.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                   help="skip Engine.warm_up (faster start; the first requests then compile)")
    p.add_argument("--log-level", dest="log_level", default="info",
                   choices=("critical", "error", "warning", "info", "debug"), help="uvicorn's log level")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from stem_jax.serve import create_app
    except ImportError as err:
        raise StemError(f"stem-jax serve needs FastAPI and uvicorn ({err})\n"
                        "  how to fix: pip install 'stem-jax[serve]'") from None
    config = config_from_args(args)
    engine = open_engine(args, config, method_options=method_options(args))
    warm = None
    if args.warm_up:
        began = time.perf_counter()
        print(f"warming up for batches of up to {args.max_batch} questions ...", flush=True)
        warm = engine.warm_up(args.max_batch, method=args.method)
        print(f"warm-up done in {time.perf_counter() - began:.1f}s: {warm}", flush=True)
    app = create_app(engine, method=args.method, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                     queue_size=args.queue_size, warm_up=warm)
    print(f"serving {engine.dataset.name} ({args.method}, planner {engine.planner_spec.name}) on "
          f"http://{args.host}:{args.port}  (docs: /docs, metrics: /metrics; Ctrl-C stops after open requests)",
          flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)  # waits for open requests
    return 0
