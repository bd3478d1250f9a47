"""``stem-jax calibrate``: choose θ for the configured encoder and engine on a dev split.

Traces a dev sample once per θ of a grid through STEM's own pipeline
(:func:`stem_jax.methods.stem.calibration.sweep_theta`), keeps the θ with the best mean F1 over hops
and stores it as ``calibration.json`` beside the KG embeddings, where every later run with matching
engine settings picks it up (``--engine.calibrated=false`` ignores it).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from stem_jax.cli.args import config_from_args
from stem_jax.cli.report import markdown_table, run_metadata
from stem_jax.errors import StemError
from stem_jax.methods.stem.calibration import DEFAULT_GRID, choose_theta, save_calibration, sweep_theta


def add_calibrate_parser(sub, add_dataset_flags, add_cache_flags, add_config_flags, add_planner_flags) -> None:
    p = sub.add_parser(
        "calibrate", help="choose the Breadth threshold θ on a dev split and store it beside the embeddings",
        description="Trace --split (default dev; test is refused) once per θ of --grid with the configured engine, "
        "score each θ (mean F1 over hops, ties: Hit, then the θ nearest the paper's 0.6) and write calibration.json "
        "beside the KG's embeddings. Later runs use it when their relation bonus and strategy match and "
        "--tracer.theta is left at its default.")
    add_dataset_flags(p, default="metaqa")
    p.set_defaults(split="dev", limit=150)
    add_cache_flags(p)
    add_config_flags(p)
    add_planner_flags(p, default="pattern")
    p.add_argument("--grid", type=float, nargs="+", default=list(DEFAULT_GRID), help="θ values to try")
    p.add_argument("--json", type=Path, default=None, help="also write the sweep here")
    p.add_argument("--no-save", action="store_true", help="print the sweep, do not store the calibration")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from stem_jax.cli.engine_args import open_engine

    if args.split == "test":
        raise StemError("calibrate on a dev/validation split, never on test\n  how to fix: pass --split dev")
    bad = [v for v in args.grid if not 0.0 <= v <= 1.0]
    if bad:
        raise StemError(f"--grid values must lie in [0, 1] (θ thresholds a cosine-based T-Score), got {bad[0]}")
    config = config_from_args(args)
    started = time.perf_counter()
    engine = open_engine(args, config)
    method = engine.method("stem")
    questions = list(engine.dataset.questions)
    if not questions:
        raise StemError("no questions to calibrate on: the selection is empty\n  how to fix: check --split and --hops")
    plan, _ = method.planner_for(questions)
    rows = sweep_theta(method.pipeline, questions, plan, args.grid)
    table = markdown_table(["θ", "mean F1", "mean Hit"] + [f"{h} F1" for h in rows[0]["hops"]],
                           [[r["theta"], round(100 * r["mean_f1"], 2), round(100 * r["mean_hit"], 2)]
                            + [round(100 * h["f1"], 2) for h in r["hops"].values()] for r in rows])
    print(f"\n{table}\n")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": run_metadata(), "command": "stem-jax " + " ".join(args.argv),
                                         "split": args.split, "limit": args.limit, "questions": len(questions),
                                         "sweep": rows}, indent=2) + "\n")
    theta = choose_theta(rows)
    if args.no_save:
        print(f"best θ = {theta} (not stored)  [{time.perf_counter() - started:.1f}s]")
        return 0
    path = save_calibration(engine.embeddings, method.pipeline, rows, split=args.split, questions=len(questions))
    print(f"θ = {theta} written to {path}  [{time.perf_counter() - started:.1f}s]")
    return 0
