"""STEM, SAFE and SCR side by side on the same MetaQA-partial questions, machine and session.

    STEM_DATA_DIR=../shared/data python experiments/compare_methods.py --per-hop 300 \
        --scr-checkpoint runs/scr-metaqa [--gnn-checkpoint runs/gnn-metaqa]

One :class:`stem_jax.Engine` (KG index, MiniLM tables, pattern planner) serves all three methods,
so data, encoder, index, planner and hardware are identical; each method writes its own resumable
run folder under --runs. The question set is a deterministic stratified subset (per hop, the N
questions with the lowest sha256(qid)) of the test split. Reports per hop Hit, Hit@1, F1, coverage,
retrieval ms per question (median, p95, from each record's stage timings), questions/s (wall time
of the evaluate call, planning included), jit compile counts, the training time of the learned parts
(read from their run folders) and the gold-path bound of the same questions.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from stem_jax import Engine, StemConfig
from stem_jax.cli.gnn import subset
from stem_jax.cli.report import markdown_table, run_metadata, write_report
from stem_jax.eval.bound import gold_path_bound
from stem_jax.eval.scoring import read_finished
from stem_jax.plan.factory import PlannerSpec

RETRIEVAL_STAGES = {"stem": ("anchor", "trace", "answer"), "safe": ("retrieval",), "scr": ("search",)}


def retrieval_ms(records: list[dict], method: str) -> list[float]:
    keys = RETRIEVAL_STAGES[method]
    out = []
    for r in records:
        ms = r.get("ms", {})
        present = [ms[k] for k in keys if k in ms]
        if not present and ms:  # a method that names its stages differently: everything but planning/encoding
            present = [v for k, v in ms.items() if k not in ("plan", "encode", "gnn")]
        out.append(float(sum(present)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-hop", type=int, default=300)
    parser.add_argument("--methods", default="stem,safe,scr")
    parser.add_argument("--scr-checkpoint", type=Path, default=None)
    parser.add_argument("--gnn-checkpoint", type=Path, default=None, help="also a STEM row with GNN guidance")
    parser.add_argument("--runs", type=Path, default=Path("runs/compare"))
    parser.add_argument("--out", type=Path, default=Path("experiments/results"))
    args = parser.parse_args()

    methods = [m for m in args.methods.split(",") if m]
    options = {"scr": {"checkpoint": args.scr_checkpoint}} if args.scr_checkpoint else {}
    engine = Engine.open("metaqa", config=StemConfig(), planner=PlannerSpec("pattern"), split="test",
                         method_options=options, log=print,
                         guidance=args.gnn_checkpoint)
    questions = subset(engine.dataset.questions, args.per_hop)
    rows, results = [], {}
    bound = gold_path_bound(questions, engine.index, engine.dataset.entity_names) or {"groups": {}}
    for name in methods + (["stem+gnn"] if args.gnn_checkpoint else []):
        method = "stem" if name.startswith("stem") else name
        if name == "stem" and args.gnn_checkpoint:
            engine._guidance, engine._guidance_built = None, True  # plain STEM row: no guidance
            engine._methods.pop("stem", None)
        if name == "stem+gnn":
            engine._guidance_built = False
            engine._methods.pop("stem", None)
        from stem_jax.trace.tracer import anchor_batch, trace_batch

        before = {"trace_batch": trace_batch._cache_size(), "anchor_batch": anchor_batch._cache_size()}
        began = time.perf_counter()
        summary = engine.evaluate(args.runs / name, questions=questions, method=method, show_progress=False)
        wall = time.perf_counter() - began
        compiles = {"trace_batch": trace_batch._cache_size() - before["trace_batch"],
                    "anchor_batch": anchor_batch._cache_size() - before["anchor_batch"]}
        records = [r for r in read_finished(args.runs / name / "predictions.jsonl").values()]
        ms = retrieval_ms(records, method)
        results[name] = {"summary": summary, "wall_seconds": wall, "questions_per_second": len(questions) / wall,
                         "retrieval_ms_median": float(np.median(ms)), "retrieval_ms_p95": float(np.percentile(ms, 95)),
                         "stem_jit_compiles": compiles}
        for group in sorted(summary["groups"]):
            mean = summary["groups"][group]["mean"]
            rows.append([name, group, summary["groups"][group]["n"], round(100 * mean["hit"], 2),
                         round(100 * mean["hit_at_1"], 2), round(100 * mean["f1"], 2),
                         round(100 * mean["coverage"], 2) if "coverage" in mean else "-",
                         round(results[name]["retrieval_ms_median"], 2), round(results[name]["retrieval_ms_p95"], 2),
                         round(results[name]["questions_per_second"], 1)])
        print(markdown_table(["method", "hops", "n", "Hit", "Hit@1", "F1", "coverage", "ms p50", "ms p95", "q/s"],
                             rows[-len(summary["groups"]):]))
    for group in sorted(bound["groups"]):
        mean = bound["groups"][group]["mean"]
        rows.append(["gold-path bound", group, bound["groups"][group]["n"], round(100 * mean["hit"], 2), "-",
                     round(100 * mean["f1"], 2), "100", "-", "-", "-"])
    training = {}
    if args.scr_checkpoint and (args.scr_checkpoint / "train-scr.json").exists():
        training["scr"] = json.loads((args.scr_checkpoint / "train-scr.json").read_text()).get("seconds")
    if args.gnn_checkpoint and (args.gnn_checkpoint / "train-gnn.json").exists():
        training["gnn"] = json.loads((args.gnn_checkpoint / "train-gnn.json").read_text()).get("total_seconds")
    planner_report = engine.planner.report if hasattr(engine.planner, "report") else {}
    training["pattern_planner"] = planner_report.get("seconds")
    headers = ["method", "hops", "questions", "Hit", "Hit@1", "F1", "coverage", "retrieval ms p50", "ms p95",
               "questions/s"]
    table = markdown_table(headers, rows)
    meta = run_metadata()
    text = (f"Command: `python experiments/compare_methods.py --per-hop {args.per_hop}`\n\n"
            f"MetaQA-partial test, stratified subset ({args.per_hop} per hop, lowest sha256(qid)), pattern planner, "
            f"one engine, machine {meta['machine']} ({meta['cpu_count']} cores), commit {meta['commit']}. "
            "Retrieval ms: STEM anchor+trace+answer, SAFE retrieval (value retrieval + ADJ + matching), SCR beam "
            "search; planning and text encoding excluded. questions/s: whole evaluate call.\n\n"
            f"{table}\n\nTraining seconds: {training}\n\nSTEM jit compiles per row: "
            f"{ {k: v['stem_jit_compiles'] for k, v in results.items()} }\n")
    print(text)
    write_report(args.out, f"compare-methods-metaqa-{args.per_hop}per-hop",
                 {"meta": meta, "per_hop": args.per_hop, "results": results, "gold_path_bound": bound,
                  "training_seconds": training}, text)


if __name__ == "__main__":
    main()
