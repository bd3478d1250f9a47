"""``stem-jax calibrate``: choose θ and the KG's conventions for the configured encoder and engine on a dev split.

Traces a dev sample once per θ of a grid and per traced convention (direction, used-triple rule)
through STEM's own pipeline (:func:`stem_jax.methods.stem.calibration.sweep_theta`), scores topic
exclusion on and off from the same traces, keeps the best mean F1 over hops and stores θ and the
conventions as ``calibration.json`` beside the KG embeddings, where every later run with matching
engine settings picks them up (``--engine.calibrated=false`` ignores them). Works for any dataset,
``--dataset files --data-dir FOLDER`` included (its ``dev.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from stem_jax.cli.args import command_parser, config_from_args
from stem_jax.cli.planning import add_planner_flags
from stem_jax.cli.report import markdown_table, run_metadata
from stem_jax.errors import StemError
from stem_jax.methods.stem.calibration import (
    CONVENTION_GRID,
    DEFAULT_GRID,
    choose,
    conventions_key,
    save_calibration,
    setting_rank,
    sweep_theta,
    tied,
    tied_conventions,
)

SHOWN_ROWS = 10  # sweep rows printed (best first); every row goes to calibration.json and --json
SMALL_DEV = 20  # fewer dev questions than this: say that dev is too small to tell settings apart


def _break_ties(rows: list[dict], engine, questions: list) -> tuple[dict[tuple, float] | None, dict]:
    """When several convention sets tie on dev (mean F1 and Hit), the data's own gold paths decide: each tied
    set's gold-path bound (:func:`stem_jax.eval.bound.engine_bound`) on these questions, the highest preferred.
    Returns (conventions -> bound F1, or None; what to report: counts, the bounds and lines to print)."""
    from stem_jax.eval.bound import engine_bound

    top = tied(rows)
    sets = tied_conventions(rows)
    report: dict = {"tied_settings": len(top), "settings": len(rows), "questions": len(questions), "lines": []}
    lines = report["lines"]
    if len(questions) < SMALL_DEV:
        lines.append(f"note: only {len(questions)} dev questions: too few to tell settings apart reliably\n"
                     f"  how to fix: calibrate on more (--limit {max(150, SMALL_DEV)}, or a larger dev split)")
    if len(top) > 1:
        lines.append(f"{len(top)} of {len(rows)} settings tie at mean F1 {100 * top[0]['mean_f1']:.2f}, mean Hit "
                     f"{100 * top[0]['mean_hit']:.2f} on dev")
    if len(sets) < 2:
        return None, report
    prefer: dict[tuple, float] = {}
    for conventions in sets:
        bound = engine_bound(questions, engine.index, engine.dataset.entity_names, **conventions)
        prefer[conventions_key({"conventions": conventions})] = bound["overall"]["mean"].get("f1", 0.0) if bound else 0.0
    report["bounds"] = [{"conventions": c, "bound_f1": prefer[conventions_key({"conventions": c})]} for c in sets]
    words = "; ".join(f"{', '.join(f'{k}={v}' for k, v in c.items())}: {100 * prefer[conventions_key({'conventions': c})]:.1f}"
                      for c in sets)
    if len(set(prefer.values())) > 1:
        lines.append(f"  the tie goes to the conventions whose walk of the data's own gold paths scores best (bound F1 "
                     f"{words})")
        report["broken_by"] = "gold-path bound"
    else:
        lines.append(f"  the data's gold paths do not tell them apart either (bound F1 {words}); the engine's "
                     "default conventions are kept")
        report["broken_by"] = "engine defaults"
    return prefer, report


def add_calibrate_parser(sub) -> None:
    p = command_parser(
        sub, "calibrate", dataset="metaqa", help="choose θ and the KG's conventions on a dev split and store them beside the embeddings",
        description="Trace --split (default dev; test is refused) once per θ of --grid and per convention "
        "(engine.direction undirected|directed, engine.used_triples run|branch|step; engine.exclude_topic on|off "
        "is scored from the same traces), score each (mean F1 over hops, ties: Hit, then the engine's default "
        "conventions, then the θ nearest the paper's 0.6) and write calibration.json beside the KG's embeddings. "
        "Later runs use them when their relation bonus and strategy match: θ when --tracer.theta is not given, "
        "each convention when its flag is not. --keep-conventions sweeps θ only, under the configured "
        "conventions.")
    p.set_defaults(split="dev", limit=150)
    add_planner_flags(p, default="pattern")
    p.add_argument("--grid", type=float, nargs="+", default=list(DEFAULT_GRID), help="θ values to try")
    p.add_argument("--json", type=Path, default=None, help="also write the sweep here")
    p.add_argument("--no-save", action="store_true", help="print the sweep, do not store the calibration")
    p.add_argument("--keep-conventions", action="store_true",
                   help="sweep θ only, under the configured direction, used-triple rule and topic exclusion")
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
    conventions = None if args.keep_conventions else CONVENTION_GRID
    rows = sweep_theta(method, questions, plan, args.grid, conventions=conventions)
    conv = lambda r: [r["conventions"][k] for k in ("direction", "used_triples", "exclude_topic")] if conventions else []  # noqa: E731
    prefer, ties = _break_ties(rows, engine, questions)
    ranked = sorted(rows, key=lambda r: setting_rank(r, 0.6, prefer), reverse=True)
    shown = ranked[:SHOWN_ROWS]
    table = markdown_table(["θ"] + (["direction", "used triples", "exclude topic"] if conventions else [])
                           + ["mean F1", "mean Hit"] + [f"{h} F1" for h in rows[0]["hops"]],
                           [[r["theta"]] + conv(r) + [round(100 * r["mean_f1"], 2), round(100 * r["mean_hit"], 2)]
                            + [round(100 * h["f1"], 2) for h in r["hops"].values()] for r in shown])
    more = f" (the best {len(shown)} of {len(rows)} settings; all of them in calibration.json / --json)" \
        if len(rows) > len(shown) else ""
    print(f"\n{table}\n{more.strip()}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": run_metadata(), "command": "stem-jax " + " ".join(args.argv),
                                         "split": args.split, "limit": args.limit, "questions": len(questions),
                                         "sweep": rows, "ties": ties}, indent=2) + "\n")
    for line in ties["lines"]:
        print(line)
    best = choose(rows, prefer=prefer)
    chosen = f"θ = {best['theta']}" + "".join(f", {k}={v}" for k, v in best.get("conventions", {}).items())
    if args.no_save:
        print(f"best {chosen} (not stored)  [{time.perf_counter() - started:.1f}s]")
        return 0
    path = save_calibration(engine.embeddings, method, rows, split=args.split, questions=len(questions),
                            prefer=prefer, ties={k: v for k, v in ties.items() if k != "lines"})
    print(f"{chosen} written to {path}  [{time.perf_counter() - started:.1f}s]")
    return 0
