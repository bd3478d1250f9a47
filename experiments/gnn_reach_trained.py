"""Triple-GNN guidance inference over the MetaQA-partial test split with a trained checkpoint, the way
`eval --guidance gnn` runs it (GNNGuidance.table: host subgraph build, bins, forward, top-K; no cache):
the exact reach-aware forward (method=reach, the default) and the plain batched forward (method=full).

    STEM_DATA_DIR=../shared/data python experiments/gnn_reach_trained.py --limit 0 --methods reach,full \
        --checkpoint runs/gnn-metaqa-1000 --record

``--limit N`` takes the first N questions per hop (0: the full split, 38,851 questions, one oracle plan
each). Each listed pass runs in turn in one process (a method's first pass compiles its shapes);
``--no-prefetch`` builds each chunk's subgraphs after the previous chunk's forward instead of beside it.
Prints seconds, questions/s and load averages per pass, and the largest difference between the last
``full`` and ``reach`` passes. ``--record`` writes experiments/results/gnn-inference-full-split-<backend>
[-<label>].{json,md} (machine, versions, commit); without it, runs/bench/.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from stem_jax import Engine
from stem_jax.eval.report import markdown_table, run_metadata, write_report

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=0, help="questions per hop (0: the whole split)")
    parser.add_argument("--methods", default="reach,full", help="passes, in order (default reach,full)")
    parser.add_argument("--checkpoint", default=os.environ.get("GNN_CHECKPOINT", "runs/gnn-metaqa-1000"),
                        help="train-gnn run folder (default $GNN_CHECKPOINT or runs/gnn-metaqa-1000)")
    parser.add_argument("--no-prefetch", dest="prefetch", action="store_false",
                        help="build the next chunk's subgraphs only after this chunk's forward")
    parser.add_argument("--label", default="", help="suffix of the result file names")
    parser.add_argument("--record", action="store_true", help=f"write into {RESULTS}/ instead of runs/bench")
    args = parser.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]

    load_before = os.getloadavg()
    engine = Engine.open("metaqa", planner="oracle", split="test", limit=args.limit or None, guidance=args.checkpoint)
    guidance = engine.guidance
    guidance.cache_dir = None  # time the computation, not a cache read
    guidance.prefetch = args.prefetch
    questions = list(engine.dataset.questions)
    pairs = []
    for question, beams in zip(questions, engine.planner.plan_batch(questions), strict=True):
        for beam in beams if isinstance(beams, list) else [beams]:
            pairs.append((question, getattr(beam, "schema", beam)))
    print("questions", len(questions), "pairs", len(pairs), flush=True)

    passes, tables = [], {}
    for number, method in enumerate(methods, 1):
        guidance.method = method
        guidance.batch_stats = {}
        began = time.perf_counter()
        table = guidance.table(pairs, show_progress=False)
        seconds = time.perf_counter() - began
        tables[method] = table
        stats = guidance.batch_stats
        passes.append({"pass": number, "method": method, "seconds": seconds, "questions_per_second": len(questions) / seconds,
                       "pairs_per_second": len(pairs) / seconds, "batches": stats.get("batches", 0),
                       "shapes": len(stats.get("shapes", [])), "load_average_after": list(os.getloadavg())})
        print(method, f"{seconds:.1f}s {len(questions) / seconds:.1f} q/s", os.getloadavg(), flush=True)

    agreement = None
    if "full" in tables and "reach" in tables:
        a, b = tables["full"], tables["reach"]
        agreement = {"max_abs_probability_difference": float(np.abs(a.probs - b.probs).max()),
                     "rows_with_different_top_ids": int((a.ids != b.ids).any(1).sum()), "rows": len(pairs)}
        print(agreement)

    meta = run_metadata()
    meta["load_average_before"] = list(load_before)
    hops = {h: sum(q.hops == h for q in questions) for h in (1, 2, 3)}
    spec = guidance.spec
    command = "python experiments/gnn_reach_trained.py " + " ".join(sys.argv[1:] if argv is None else argv)
    rows = [[p["pass"], p["method"], round(p["seconds"], 1), round(p["questions_per_second"], 1), p["batches"],
             p["shapes"], " / ".join(f"{x:.2f}" for x in p["load_average_after"])] for p in passes]
    md = (f"Triple-GNN guidance inference, MetaQA-partial test, {len(questions)} questions {hops} "
          f"({len(pairs)} oracle plans), checkpoint `{args.checkpoint}` (L={spec.layers}, d={spec.d_gnn}, "
          f"params {guidance.info.get('params_sha', '?')}), top {guidance.width} per plan, no cache, host "
          f"subgraph build and top-K included, prefetch {'on' if args.prefetch else 'off'}.\n\n"
          f"Command: `{command}`\n\nMachine: {meta}\n\n"
          + markdown_table(["pass", "method", "seconds", "questions/s", "bins", "bin shapes", "load average after"], rows))
    if agreement:
        md += (f"\n\nfull vs reach: largest probability difference {agreement['max_abs_probability_difference']:.1e}; "
               f"rows whose top-{guidance.width} ids (or their order) differ: {agreement['rows_with_different_top_ids']} "
               f"of {agreement['rows']}")
    payload = {"meta": meta, "command": command, "checkpoint": args.checkpoint, "spec": spec.as_dict(),
               "params": guidance.info.get("params_sha"), "questions": len(questions), "hops": hops, "pairs": len(pairs),
               "prefetch": args.prefetch, "passes": passes, "agreement": agreement}
    name = f"gnn-inference-full-split-{meta['backend']}" + (f"-{args.label}" if args.label else "")
    out = RESULTS if args.record else Path("runs/bench")
    json_path, _ = write_report(out, name, payload, md)
    print(md)
    print(f"wrote {json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
