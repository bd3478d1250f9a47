"""Natural questions over a real Freebase slice: every planner row on webqsp-r dev, over all of its questions.

    STEM_DATA_DIR=../shared/data python experiments/webqsp_dev.py [--rows oracle,pattern,templates,paths,both,rog]

Needs `stem-jax index`, `stem-jax train-planner` (which also trains the KG's answer scorer) and (for the guided row) `stem-jax train-gnn` on the KG first:

    stem-jax index --dataset files --data-dir $STEM_DATA_DIR/webqsp-r
    stem-jax train-planner --dataset files --data-dir $STEM_DATA_DIR/webqsp-r
    stem-jax train-gnn --dataset files --data-dir $STEM_DATA_DIR/webqsp-r --out runs/gnn-webqsp-r

Each row is one `stem-jax eval --split dev` run folder under ``runs/webqsp-dev/<row>`` (resumable); metrics are over
every dev question (163), a question the loader could not answer (no topic entity found) counting as a miss.
Beside them: RoG's own three LLM plans walked exactly from the topic (no STEM), the data's gold-path bound, and
GNN-RAG's published figures on the same questions (from the data's SOURCES.md). Also the answered share and
answered Hit@1 of the default row's confidence threshold, and a precision/coverage curve. Writes
``experiments/results/webqsp-dev.{json,md}``. A few minutes a row on a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stem_jax.data.types import PathStep  # noqa: E402
from stem_jax.eval.metrics import SplitScorer  # noqa: E402
from stem_jax.eval.report import markdown_table, portable_paths, run_metadata, write_report  # noqa: E402
from stem_jax.eval.scoring import answered_precision  # noqa: E402

ROWS = {
    "oracle": ["--planner", "oracle"],
    "oracle-tracer-ranking": ["--planner", "oracle", "--engine.answer_scorer", "off"],
    "pattern": ["--planner", "pattern"],  # the default: the planner train-planner chose on held-out questions
    # the same without the learned answer scorer (answers in the tracer's beam-support order, cut at 0.5)
    "pattern-tracer-ranking": ["--planner", "pattern", "--engine.answer_scorer", "off"],
    "templates": ["--planner", "pattern", "--planner.paths", "templates"],
    "paths": ["--planner", "pattern", "--planner.paths", "paths"],
    "both": ["--planner", "pattern", "--planner.paths", "both"],
    "rog": ["--plans-file", "{data}/dev.jsonl"],  # RoG's LLM plans (the rog_plans field), traced by STEM
    "rog-tracer-ranking": ["--plans-file", "{data}/dev.jsonl", "--engine.answer_scorer", "off"],
    # Triple-GNN guidance trained on webqsp-r train: stem-jax train-gnn --dataset files --data-dir D --out runs/gnn-webqsp-r
    "pattern+gnn": ["--planner", "pattern", "--guidance", "gnn", "--gnn-checkpoint", "{root}/runs/gnn-webqsp-r"],
    "safe": ["--method", "safe", "--planner", "pattern"],
}
# GNN-RAG's published per-question results on these 163 dev questions (SOURCES.md): Hit / Hit@1 / F1
PEERS = {"GNN-RAG (LLaMA2-7B reader)": (82.2, 76.7, 66.4), "GNN-RAG+RA": (90.8, 81.6, 69.1)}


def run_row(name: str, data: Path, out: Path) -> dict:
    flags = [f.format(data=data, root=ROOT) for f in ROWS[name]]
    command = [sys.executable, "-m", "stem_jax.cli.main", "eval", "--dataset", "files", "--data-dir", str(data),
               "--split", "dev", "--out", str(out), "--no-progress", *flags]
    subprocess.run([*command, "--overwrite"], check=True, env=os.environ.copy())
    metrics = json.loads((out / "metrics.json").read_text())
    every = metrics.get("all_questions") or {"mean": metrics["overall"]["mean"], "n": metrics["overall"]["n"]}
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines() if line.strip()]
    mids = sum(1 for r in records for p in r["prediction"] if p.startswith(("m.", "g.")))
    return {"command": "stem-jax " + " ".join(command[3:]), "n": every["n"], "dropped": every.get("dropped", {}),
            "hit": every["mean"]["hit"], "hit_at_1": every["mean"]["hit_at_1"], "f1": every["mean"]["f1"],
            "mids_returned": mids, "planner": metrics.get("planner_info", {}), "confident": metrics.get("confident"),
            "curve": answered_precision([{**r, "top_score": r.get("support", (r.get("scores") or [0])[0])} for r in records],
                                        [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95])}


def rog_walked(data: Path) -> dict:
    """RoG's three planned paths walked exactly (forward, as RoG writes them) from the topic, answers unioned."""
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.kg.index import build_index
    from stem_jax.kg.paths import walk_relation_path

    dataset = load_dataset(DatasetSpec(name="files", data_dir=data, split="dev"))
    index = build_index(dataset.triples)
    plans = {}
    for line in (data / "dev.jsonl").read_text().splitlines():
        record = json.loads(line)
        plans[record["id"]] = record.get("rog_plans") or []
    scorer = SplitScorer()
    totals = {"hit": 0.0, "hit_at_1": 0.0, "f1": 0.0}
    for question in dataset.questions:
        topic = index.entity_ids.get(question.topic_entities[0])
        found: list[int] = []
        for plan in plans.get(question.qid, []):
            if all(r in index.relation_ids for r in plan):
                reached, _ = walk_relation_path(index, topic, [PathStep(r) for r in plan])
                found += [e for e in reached.tolist() if e not in found and e != topic]
        metrics = scorer.strict_metrics([index.entities[e] for e in found], list(question.answers))
        for key in totals:
            totals[key] += metrics[key]
    n = len(dataset.questions) + len(dataset.dropped)
    return {"n": n, **{k: v / n for k, v in totals.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "webqsp-dev")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args()
    data = Path(os.environ.get("STEM_DATA_DIR", ROOT.parent / "shared" / "data")) / "webqsp-r"
    rows = {name: run_row(name, data, args.runs / name) for name in args.rows.split(",")}
    walked = rog_walked(data)
    table = [[name, f"{100 * r['hit']:.1f}", f"{100 * r['hit_at_1']:.1f}", f"{100 * r['f1']:.1f}", r["n"],
              r["mids_returned"], r["planner"].get("mode", "")] for name, r in rows.items()]
    table.append(["RoG plans walked exactly (no STEM)", f"{100 * walked['hit']:.1f}", f"{100 * walked['hit_at_1']:.1f}",
                  f"{100 * walked['f1']:.1f}", walked["n"], "", ""])
    table += [[f"{peer} (published)", *map(str, figures), 163, "", ""] for peer, figures in PEERS.items()]
    md = ("webqsp-r dev, every question (a question without a topic the loader found is a miss); percent. "
          "Gold-path bound of the KG (answer reached along gold_path): dev 81.6% (SOURCES.md).\n\n"
          + markdown_table(["row", "Hit", "Hit@1", "F1", "questions", "mids returned", "pattern mode"], table))
    default = rows.get("pattern")
    if default:
        md += "\n\nDefault planner, answered share and answered Hit@1 by confidence threshold (the best answer's beam " \
              "support: the planner probability of the plans that reach it):\n\n" + markdown_table(["threshold", "answered %", "answered Hit@1 %"], [
                  [c["threshold"], f"{100 * c['answered']:.1f}", f"{100 * c['precision']:.1f}"] for c in default["curve"]])
    write_report(args.out, "webqsp-dev", {"meta": run_metadata(), "rows": portable_paths(rows, ROOT, data.parent),
                                          "rog_walked": walked,
                                          "peers": PEERS, "bound_hit": 0.816}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
