"""The default engine's accuracy per KG and hop, over every question of each test split, next to its bound.

    STEM_DATA_DIR=../shared/data python experiments/default_accuracy.py [--datasets metaqa,wc2014]

Each dataset is one `stem-jax eval --planner pattern` with no other flags (the README's results rows), into
``runs/default-accuracy/<dataset>``; needs `stem-jax index` and `stem-jax train-planner` for it first. A test
question the loader had to drop (MetaQA: its topic is missing from the partial KB) is a miss, in its hop group
too. The bound is the data's own gold path walked as written, over the same every-question denominator.
Writes ``experiments/results/default-accuracy.{json,md}``. A few minutes for MetaQA on a CPU.
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

from stem_jax.data.registry import DatasetSpec, load_dataset  # noqa: E402
from stem_jax.eval.bound import data_bound  # noqa: E402
from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402
from stem_jax.eval.scoring import over_every_question  # noqa: E402
from stem_jax.kg.index import build_index  # noqa: E402


def evaluate(dataset: str, out: Path) -> dict:
    command = [sys.executable, "-m", "stem_jax.cli.main", "eval", "--dataset", dataset, "--planner", "pattern",
               "--out", str(out), "--no-progress", "--overwrite"]
    subprocess.run(command, check=True, env=os.environ.copy())
    metrics = json.loads((out / "metrics.json").read_text())
    return {"command": f"stem-jax eval --dataset {dataset} --planner pattern", "metrics": metrics,
            "row_format": metrics["config"]["encoder"]["row_format"], "mode": metrics["planner_info"].get("mode")}


def bound(dataset: str) -> dict:
    loaded = load_dataset(DatasetSpec(name=dataset))
    summary = data_bound(loaded.questions, build_index(loaded.triples), loaded.entity_names,
                         excludes_topic=loaded.excludes_topic)
    return over_every_question(summary, loaded.dropped)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="metaqa,wc2014")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "default-accuracy")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args()
    results, rows = {}, []
    for dataset in args.datasets.split(","):
        run = evaluate(dataset, args.runs / dataset)
        limit = bound(dataset)
        every = run["metrics"]["all_questions"]
        results[dataset] = {**{k: v for k, v in run.items() if k != "metrics"}, "all_questions": every,
                            "scored": {"overall": run["metrics"]["overall"], "groups": run["metrics"]["groups"]},
                            "bound": limit}
        for group, stats in [*every["groups"].items(), ("all", every)]:
            b = limit["groups"].get(group, limit) if group != "all" else limit
            rows.append([dataset, group, stats["n"], *(f"{100 * stats['mean'][k]:.2f}" for k in ("hit", "hit_at_1", "f1")),
                         f"{100 * b['mean']['hit']:.2f} / {100 * b['mean']['f1']:.2f}"])
    md = ("Default engine (`stem-jax eval --planner pattern`), test splits, every question of the split (a question "
          "the loader dropped is a miss); percent. Bound: the data's gold path walked as written, same denominator.\n\n"
          + markdown_table(["KG", "hops", "questions", "Hit", "Hit@1", "F1", "bound Hit / F1"], rows))
    write_report(args.out, "default-accuracy", {"meta": run_metadata(), "results": results}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
