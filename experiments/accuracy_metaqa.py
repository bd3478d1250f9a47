"""MetaQA-partial test accuracy of the engine defaults (issue 8), next to the paper-literal row, the numbers
before the change and the gold-path bound, per hop.

Command (from the repo root; needs `stem-jax index --dataset metaqa` and `stem-jax train-planner --dataset metaqa`;
the GNN row also needs the Triple-GNN the coordinator trained):

    STEM_DATA_DIR=../shared/data STEM_CACHE_DIR=... python experiments/accuracy_metaqa.py --runs runs/accuracy \
        --gnn-checkpoint runs/gnn-metaqa-1000 [--limit N] [--gnn-limit N]

Each row is exactly `stem-jax eval --dataset metaqa --no-progress --planner P FLAGS --out RUNS/test-SLUG` on the
full test split (no tuning flags for the default rows); a finished run folder is re-scored, not re-traced.
"Before" rows are read from experiments/results/planner-metaqa-full.json (measured at the base commit).
Besides Hit/Hit@1/F1/coverage the report counts, per hop, which capacity bucket the questions needed and why
the questions without a correct answer missed. Writes experiments/results/accuracy-metaqa.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from stem_jax.cli.main import main
from stem_jax.eval.report import markdown_table, run_metadata, write_report
from stem_jax.eval.scoring import read_finished, score_predictions

# name -> (slug, planner, flags)
VARIANTS = {
    "pattern, defaults": ("pattern-default", "pattern", []),
    "pattern + GNN guidance, defaults": ("pattern-gnn-default", "pattern", ["--guidance", "gnn", "--gnn-checkpoint"]),
    "oracle, defaults": ("oracle-default", "oracle", []),
    "oracle + GNN guidance, defaults": ("oracle-gnn-default", "oracle", ["--guidance", "gnn", "--gnn-checkpoint"]),
    "pattern, paper-literal (--engine.preset=paper)": ("pattern-paper", "pattern", ["--engine.preset=paper"]),
    "pattern B=1, defaults (B=4 >= B=1 check)": ("pattern-b1-default", "pattern", ["--planner.beam=1"]),
}
BEFORE = {  # rows of experiments/results/planner-metaqa-full.json (base commit 36c7a0a)
    "before: oracle, relation bonus": "oracle, relation bonus",
    "before: pattern B=1, relation bonus": "pattern B=1, relation bonus",
    "before: pattern B=4, relation bonus": "pattern B=4, relation bonus",
    "before: pattern B=1, paper defaults": "pattern B=1, paper defaults",
}
# any gold answer reachable along a gold relation path in the partial KB (README, data stats); topic excluded
BOUND = {"1-hop": {"hit": 97.1, "f1": 94.4}, "2-hop": {"hit": 95.8, "f1": 93.8}, "3-hop": {"hit": 96.7, "f1": 93.2}}
TARGET = {hop: {"hit": b["hit"] - 1, "hit_at_1": b["hit"] - 2, "f1": b["f1"] - 3} for hop, b in BOUND.items()}


def miss_causes(predictions: Path) -> dict[str, dict[str, int]]:
    """Per hop: capacity bucket of each question (its largest run's frontier) and the cause of each miss."""
    out: dict[str, dict[str, Counter]] = defaultdict(lambda: {"capacity": Counter(), "miss": Counter(),
                                                             "theta": Counter()})
    for line in predictions.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        hop = f"{r['hops']}-hop"
        out[hop]["capacity"][str(r.get("capacity", "?"))] += 1
        out[hop]["theta"][str(r.get("theta", "0.6 (not recorded)"))] += 1
        gold = set(r["ground_truth"])
        if gold & set(r["prediction"]):
            continue
        cov = r.get("coverage")
        if not r["runs"]:
            cause = "no runnable plan (planner/anchor)"
        elif cov is None:
            cause = "no gold path in the KB"
        elif not r["prediction"]:
            cause = "empty answer set" + (", gold path not traced" if cov < 1 else ", gold path traced")
        elif cov >= 1:
            cause = "gold path traced, gold answers cut or not bound to the answer slot"
        elif cov > 0:
            cause = "gold path partly traced (wrong plan or capacity)"
        else:
            cause = "gold path not traced (wrong plan)"
        out[hop]["miss"][cause] += 1
    return {hop: {k: dict(v) for k, v in d.items()} for hop, d in sorted(out.items())}


def run_variant(runs: Path, slug: str, planner: str, flags: list[str], limit: int | None, score_only: bool = False) -> dict:
    out = runs / (f"test-{slug}" + (f"-limit{limit}" if limit else ""))
    argv = ["eval", "--dataset", "metaqa", "--planner", planner, "--no-progress", *flags, "--out", str(out)]
    if limit:
        argv[3:3] = ["--limit", str(limit)]
    began = time.perf_counter()
    if score_only:  # the run folder was written by exactly this command earlier
        if not (out / "metrics.json").is_file():
            raise SystemExit(f"--score-only: {out}/metrics.json is missing; run `stem-jax {' '.join(argv)}` first")
    elif main(argv) != 0:
        raise SystemExit(f"failed: stem-jax {' '.join(argv)}")
    metrics = json.loads((out / "metrics.json").read_text())
    metrics["experiment_wall_seconds"] = time.perf_counter() - began
    metrics["command"] = "stem-jax " + " ".join(argv)
    metrics["per_hop_analysis"] = miss_causes(out / "predictions.jsonl")
    return metrics


def _rows(name: str, metrics: dict) -> list[list]:
    rows = []
    for hop, stats in {**metrics["groups"], "all": metrics["overall"]}.items():
        mean = stats["mean"]
        rows.append([name, hop, stats["n"], *(round(100 * mean[k], 2) if k in mean else ""
                                               for k in ("hit", "hit_at_1", "f1", "coverage", "overflow_questions"))])
    return rows


def main_experiment(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("runs/accuracy"))
    parser.add_argument("--only", nargs="*", help="variant slugs to run (default: all)")
    parser.add_argument("--label", default="", help="suffix of the result file names (e.g. for an --only subset, "
                        "so the full table is not overwritten)")
    parser.add_argument("--limit", type=int, help="first N test questions per hop (default: the full split)")
    parser.add_argument("--gnn-checkpoint", type=Path, default=Path("runs/gnn-metaqa"))
    parser.add_argument("--score-only", action="store_true", help="tabulate finished run folders, trace nothing")
    parser.add_argument("--gnn-limit", type=int, help="first N test questions per hop for the GNN row (GNN inference "
                        "is the slow part on CPU); it is compared with the default row on the same questions")
    args = parser.parse_args(argv)
    results: dict[str, dict] = {}
    before_path = Path("experiments/results/planner-metaqa-full.json")
    before = json.loads(before_path.read_text())["variants"] if before_path.is_file() else {}
    gnn_ready = Path(os.environ.get("STEM_CACHE_DIR", "")).joinpath("READY-gnn").is_file()
    skipped = {}
    for name, (slug, planner, flags) in VARIANTS.items():
        if args.only and slug not in args.only:
            continue
        if "--guidance" in flags and not gnn_ready:
            skipped[name] = "the Triple-GNN was not ready ($STEM_CACHE_DIR/READY-gnn missing)"
            continue
        limit = args.limit
        if "--gnn-checkpoint" in flags:
            flags = [*flags, str(args.gnn_checkpoint)]
            limit = args.gnn_limit or args.limit
        results[name] = run_variant(args.runs, slug, planner, flags, limit, args.score_only)
    rows = []
    for name, metrics in results.items():
        rows += _rows(name, metrics)
        unguided = name.replace(" + GNN guidance", "")
        default = results.get(unguided if unguided != name else "pattern, defaults")
        if default is not None and metrics["overall"]["n"] < default["overall"]["n"]:
            # the same questions scored from the unguided row's predictions, for a like-for-like comparison
            folder = Path(metrics["command"].split("--out ")[-1])
            qids = set(read_finished(folder / "predictions.jsonl"))
            default_folder = Path(default["command"].split("--out ")[-1])
            same = score_predictions(default_folder / "predictions.jsonl", qids)
            metrics["default_on_same_questions"] = same
            rows += _rows(f"{unguided if unguided != name else 'pattern, defaults'}, same questions as above", same)
    for name, key in BEFORE.items():
        if key in before:
            rows += _rows(name, before[key])
    for hop, b in BOUND.items():
        rows.append(["gold-path bound", hop, "", b["hit"], "", b["f1"], "", ""])
        t = TARGET[hop]
        rows.append(["target (bound - 1 / - 2 / - 3)", hop, "", round(t["hit"], 1), round(t["hit_at_1"], 1),
                     round(t["f1"], 1), "", ""])
    table = markdown_table(["variant", "hops", "questions", "Hit", "Hit@1", "F1", "Coverage", "overflowed"], rows)
    analysis = []
    for name, metrics in results.items():
        for hop, d in metrics["per_hop_analysis"].items():
            buckets = ", ".join(f"F={k}: {v}" for k, v in sorted(d["capacity"].items(), key=lambda kv: int(kv[0])
                                                                 if kv[0].isdigit() else 0))
            misses = "; ".join(f"{k}: {v}" for k, v in sorted(d["miss"].items(), key=lambda kv: -kv[1]))
            analysis.append([name, hop, "/".join(d["theta"]), buckets, misses or "none"])
    detail = markdown_table(["variant", "hops", "θ", "questions by capacity bucket (largest run)", "misses by cause"],
                            analysis)
    meta = run_metadata()
    notes = "".join(f"\n- {name}: not run, {why}" for name, why in skipped.items())
    scope = (f"MetaQA-partial test, the first {args.limit} questions per hop in the split's order" if args.limit
             else "MetaQA-partial test, every question whose topic is in the partial KB")
    text = (f"Command: `STEM_DATA_DIR=../shared/data python experiments/accuracy_metaqa.py --runs {args.runs}"
            f" --gnn-checkpoint {args.gnn_checkpoint}{' --limit ' + str(args.limit) if args.limit else ''}"
            f"{' --gnn-limit ' + str(args.gnn_limit) if args.gnn_limit else ''}"
            f"{' --only ' + ' '.join(args.only) if args.only else ''}{' --label ' + args.label if args.label else ''}`  \n"
            f"Machine: {meta['machine']}, {meta['cpu_count']} CPUs, jax {meta['jax']}, commit {meta['commit']}\n\n"
            f"{scope}, LLM-free answers (percent). "
            "Default rows use no tuning flags: relation bonus, exact anchoring, topic exclusion, capacity ladder "
            "64..1024, beam ranking with support cut 0.5, Breadth for every plan, θ from the encoder's dev "
            "calibration (see README). The paper-literal "
            "row is `--engine.preset=paper`. Before rows: experiments/results/planner-metaqa-full.json (base "
            "commit, paper T-Score with `--engine.relation_bonus=true`). Overflowed: questions with a dropped "
            f"match after the largest capacity bucket.{notes}\n\n{table}\n\n{detail}")
    print(text)
    name = "accuracy-metaqa" + (f"-limit{args.limit}" if args.limit else "") + (f"-{args.label}" if args.label else "")
    write_report(Path("experiments/results"), name,
                 {"meta": meta, "variants": results, "bound": BOUND, "target": TARGET, "skipped": skipped,
                  "before": {k: before.get(v) for k, v in BEFORE.items()}}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main_experiment())
