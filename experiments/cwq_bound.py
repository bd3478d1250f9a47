"""The evidence bound per question on cwq-e dev and webqsp-r dev: where the targets (cwq-e: Hit@1 61, F1 59, Hit 68;
GNN-RAG's level) are above what any schema graph over the KG can yield, each question that keeps them out of
reach, with its best graph and why it falls short.

    STEM_DATA_DIR=../shared/data python experiments/cwq_bound.py [--datasets cwq-e,webqsp-r]

The bound (:func:`stem_jax.plan.branches.evidence_bounds`, as ``stem-jax data-stats`` prints it): per question, the
best schema graph of a main relation path of 1-2 steps (through mediators, either direction) from one topic entity
plus at most one branch from each other topic entity, meeting at the answer. A question the loader dropped (no
topic entity found) is a miss. Reasons a question's best F1 is below 100: ``no topic`` (the loader found none in
the KG), ``unreachable`` (no graph reaches a gold answer: the answer is further than 2 steps or the KG lacks the
facts), ``partial`` (the best graph reaches some gold answers but not exactly the set: a condition the KG holds no
values for, such as a date or a comparison, or gold answers on different paths). Writes
``experiments/results/evidence-bound-dev.{json,md}`` with the machine, commit and load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.cwq_dev import machine, table  # noqa: E402
from stem_jax.data.registry import DatasetSpec, load_dataset  # noqa: E402
from stem_jax.kg.index import build_index  # noqa: E402
from stem_jax.plan.branches import bound_by_kind, bound_rows, evidence_bounds  # noqa: E402

# the targets over every question (Hit@1, F1, Hit), percent
TARGETS = {"cwq-e": {"hit_at_1": 61.0, "f1": 59.0, "hit": 68.0}}


def reason(row: dict) -> str:
    if row["topics"] == 0:
        return "no topic"
    return "unreachable" if row["best_f1"] == 0 else "partial"


def bound_dataset(data: Path) -> dict:
    dataset = load_dataset(DatasetSpec(name="files", data_dir=data, split="dev"))
    index = build_index(dataset.triples)
    names = dataset.entity_names or {}
    began = time.perf_counter()
    rows = bound_rows(dataset, evidence_bounds(dataset, index=index), [names.get(e, e) for e in index.entities])
    seconds = time.perf_counter() - began
    by_qid = {q.qid: q for q in dataset.questions}
    records = {json.loads(line)["id"]: json.loads(line) for line in (data / "dev.jsonl").read_text().splitlines()
               if line.strip()}
    for row in rows:
        record = records.get(row["qid"], {})
        question = by_qid.get(row["qid"])
        row["question"] = question.text if question is not None else record.get("question", "")
        row["answers"] = list(question.answers if question is not None else record.get("answers", []))
        row["reason"] = reason(row) if row["best_f1"] < 1 else ""
    return {"rows": rows, "by_kind": bound_by_kind(rows), "seconds": round(seconds, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="cwq-e,webqsp-r")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args()
    folder = Path(os.environ.get("STEM_DATA_DIR", ROOT.parent / "shared" / "data"))
    results = {name: bound_dataset(folder / name) for name in args.datasets.split(",")}
    meta = machine()
    parts = [f"Evidence bound per question, dev splits, percent over every question (a question the loader could not "
             f"find a topic for is a miss). Commit {meta['commit'][:10]}"
             f"{' (uncommitted changes)' if meta['dirty'] else ''}, {meta['platform']}, {meta['cpus']} CPUs, load "
             f"average {', '.join(f'{x:.2f}' for x in meta['load_average'])} at {meta['date']}.\n"]
    for name, found in results.items():
        kinds = found["by_kind"]
        parts.append(f"## {name} dev\n\n" + table(
            ["questions", "n", "any gold answer", "exact gold set", "best F1"],
            [[kind, row["n"], f"{row['hit']:.1f}", f"{row['exact']:.1f}", f"{row['best_f1']:.1f}"]
             for kind, row in kinds.items()]))
        targets = TARGETS.get(name)
        if targets:
            above = [f"{label} {targets[key]:g} (bound {kinds['all'][bound_key]:.1f})"
                     for key, label, bound_key in (("hit_at_1", "Hit@1", "hit"), ("f1", "F1", "best_f1"),
                                                   ("hit", "Hit", "hit"))
                     if targets[key] > kinds["all"][bound_key]]
            parts.append("Targets above the bound: " + ("; ".join(above) if above else "none") + ". Hit and Hit@1 "
                         "are bounded by the questions where some graph reaches a gold answer (a ranker can put it "
                         "first); F1 by the best F1; the exact-set column counts the questions where F1 100 is "
                         "possible.")
        short = [r for r in found["rows"] if r["best_f1"] < 1]
        counts = {k: sum(r["reason"] == k for r in short) for k in ("no topic", "unreachable", "partial")}
        parts.append(f"{len(short)} of {kinds['all']['n']} questions have best F1 below 100: "
                     + ", ".join(f"{k} {v}" for k, v in counts.items()) + ".\n\n"
                     + table(["qid", "reason", "best F1", "best graph", "question", "gold (first 3)"],
                             [[r["qid"], r["reason"], f"{100 * r['best_f1']:.1f}", r["graph"].replace("|", "/"),
                               r["question"].replace("|", "/"), "; ".join(r["answers"][:3]).replace("|", "/")]
                              for r in sorted(short, key=lambda r: (r["reason"], r["best_f1"], r["qid"]))]))
    md = "\n\n".join(parts) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "evidence-bound-dev.json").write_text(json.dumps({"meta": meta, "targets": TARGETS, **results},
                                                                 indent=1, ensure_ascii=False) + "\n")
    (args.out / "evidence-bound-dev.md").write_text(md)
    print("\n\n".join(parts[:1] + [p for p in parts[1:] if p.startswith(("##", "Targets"))]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
