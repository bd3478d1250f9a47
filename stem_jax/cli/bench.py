"""``stem-jax bench stages``: per-stage latency and throughput of a loaded engine by batch size."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from stem_jax.cli.args import ValuedFlag, add_valued_flags, command_parser, config_from_args
from stem_jax.cli.engine_args import open_engine
from stem_jax.cli.gnn import add_guidance_flags
from stem_jax.cli.planning import add_planner_flags
from stem_jax.cli.report import markdown_table, run_metadata, write_report
from stem_jax.config import as_dict

RESULTS = Path("experiments/results")


def parse_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--batch-sizes expects numbers like 1,8,64, got {text!r}") from None
    if not sizes or any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"--batch-sizes expects positive numbers like 1,8,64, got {text!r}")
    return sizes


# bench stages' valued flags: (flag, type, default, help)
STAGES_FLAGS: tuple[ValuedFlag, ...] = (
    ("--batch-sizes", parse_sizes, (1, 8, 64, 256, 1024), "batch sizes (default 1,8,64,256,1024)"),
    ("--repeats", int, None, "warm calls per batch size (default: enough for ~2048 questions, 3 to 50 calls)"),
    ("--warmup", int, 2, "untimed calls after the first, per batch size (default 2)"),
)
# and the parts of the run each --no-* flag leaves out: (flag, dest, help)
STAGES_SWITCHES = (
    ("--no-precompile", "precompile",
     "skip Engine.warm_up after the first call (warm calls may then compile capacity-ladder shapes)"),
    ("--no-overlapped", "overlapped", "skip the overlapped row (as many calls again, each batch planned and encoded "
     "on a background thread while the one before is traced and answered)"),
    ("--no-encoder-memo", "encoder_memo", "turn off the encoder's in-memory memo of repeated strings: every question "
     "is encoded; schema-step texts are still read from the KG's tables where they are fixed per KG (those naming an "
     "entity, 'Kismet directed by [ENT1]', and those between two placeholders, '[ENT1] directed by [ENT2]'; "
     "--encoder.step_table_max=0: encoded too)"),
)


def add_bench_stages_parser(bench_sub: Any) -> None:
    p = command_parser(
        bench_sub, "stages", dataset="metaqa",
        help="per-stage latency (p50/p95/p99), throughput, compiles and memory by batch size",
        description="Open the engine once, then time question encoding, planning, schema encoding, GNN guidance, "
        "anchoring, tracing and answers for batches of 1, 8, 64, 256 and 1024 questions: first call (compiles) and "
        "warm calls on other questions, planned afresh. Writes JSON + Markdown + a PNG.")
    p.set_defaults(hops=(2,))
    add_planner_flags(p, default="pattern")
    add_guidance_flags(p)
    add_valued_flags(p, STAGES_FLAGS)
    for flag, dest, text in STAGES_SWITCHES:
        p.add_argument(flag, dest=dest, action="store_false", help=text)
    p.add_argument("--out", type=Path, default=None,
                   help="where to write bench-stages-*.json/.md/.png (default runs/bench)")
    p.add_argument("--record", action="store_true",
                   help=f"write into {RESULTS}/ (the committed results) instead of --out")
    p.set_defaults(func=cmd_bench_stages)


def cmd_bench_stages(args: argparse.Namespace) -> int:
    from stem_jax.bench.stages import bench_stages, encoder_table, encoder_verdicts, plot_stages, stage_table

    config = config_from_args(args)
    started = time.perf_counter()
    load_before = os.getloadavg()  # a shared machine: timings mean little without the load beside them
    engine = open_engine(args, config)
    if not args.encoder_memo and hasattr(engine.encoder, "memo_size"):
        engine.encoder.memo_size = 0
    results = bench_stages(engine, engine.dataset.questions, batch_sizes=args.batch_sizes, repeats=args.repeats,
                           warmup=args.warmup, precompile=args.precompile, overlapped=args.overlapped,
                           log=print)
    meta = run_metadata()
    meta["load_average"] = {"before": [round(x, 2) for x in load_before],
                            "after": [round(x, 2) for x in os.getloadavg()]}
    hops = "-".join(map(str, args.hops))
    guidance = "-gnn" if getattr(args, "guidance", "none") == "gnn" else ""
    guidance += "" if args.encoder_memo else "-nomemo"
    name = f"bench-stages-{engine.dataset.name}-{hops}hop-{engine.planner_spec.label}{guidance}-{meta['backend']}"
    results["title"] = f"{engine.dataset.name} {hops}-hop, planner {engine.planner_spec.label}{guidance}, {meta['backend']}"
    headers, rows = stage_table(results)
    table = markdown_table(headers, rows)
    encoder_md = markdown_table(*encoder_table(results))
    verdicts = encoder_verdicts(results)
    print("\n" + table + "\n\n" + encoder_md + "".join(f"\n{v}" for v in verdicts))
    out = RESULTS if args.record else (args.out or Path("runs/bench"))
    payload = {"meta": meta, "command": "stem-jax " + " ".join(getattr(args, "argv", [])),
               "dataset": engine.dataset.name, "split": args.split, "hops": list(args.hops),
               "questions_loaded": len(engine.dataset.questions), "planner": engine.planner_spec.label,
               "guidance": getattr(args, "guidance", "none"), "config": as_dict(config), **results,
               "wall_seconds": time.perf_counter() - started}
    paths = write_report(out, name, payload, f"Command: `{payload['command']}`\n\nMachine: {meta}\n\n"
                         "Per-batch latency (ms per call of the whole batch), warm calls; first call includes "
                         f"compilation.\n\n{table}\n\nText encoder (question + schema-triple encoding) over the "
                         "warm calls: real tokens, padded tokens (rows x row length, what the dense layers "
                         f"compute), forwards, share of the warm time, ms per token.\n\n{encoder_md}\n"
                         + "".join(f"\n- {v}" for v in verdicts))
    plot_stages(results, out / f"{name}.png")
    print(f"wrote {paths[0]}, {paths[1]} and {out / (name + '.png')}")
    return 0
