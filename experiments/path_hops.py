"""How long may the path ranker's relation paths be? The pattern planner trained with ``planner.path_max_hops`` N,
per natural-question KG, over every dev question, next to the evidence bound at N steps.

    STEM_DATA_DIR=../shared/data python experiments/path_hops.py --kg webqsp-r --cache 2=DIR2 --cache 3=DIR3

Each ``--cache HOPS=DIR`` is a cache folder of its own (copy one that holds the KG's index): a planner and answer
scorer are trained there with ``stem-jax train-planner --planner.path_max_hops HOPS --planner.path_hops fixed`` when
it has none yet, then ``stem-jax eval --split dev --planner pattern`` runs with it (``--reuse``: read a finished run
folder). Metrics are over every dev question (a question the loader dropped is a miss). Writes
``experiments/results/path-hops-<kg>.{json,md}`` with the machine, commit and load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.cwq_dev import hop_row, run_row  # noqa: E402
from stem_jax.eval.report import markdown_table, portable_paths, run_metadata, write_report  # noqa: E402


def bound(data: Path, max_hops: int) -> dict[str, float]:
    """The evidence bound over every dev question with main paths and branches of up to ``max_hops`` steps."""
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.plan.branches import evidence_bounds

    dataset = load_dataset(DatasetSpec(name="files", data_dir=data, split="dev"))
    found = evidence_bounds(dataset, max_hops=max_hops)
    total = len(dataset.questions) + len(dataset.dropped)
    return {"n": total, "hit": sum(b.best_f1 > 0 for b in found.values()) / total,
            "hit_at_1": sum(b.exact for b in found.values()) / total,
            "f1": sum(b.best_f1 for b in found.values()) / total}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kg", default="webqsp-r", help="a folder of $STEM_DATA_DIR in the files format")
    parser.add_argument("--cache", action="append", required=True, metavar="HOPS=DIR")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "path-hops")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--reuse", action="store_true", help="read finished run folders instead of re-running them")
    args = parser.parse_args()
    data = Path(os.environ.get("STEM_DATA_DIR", ROOT.parent / "shared" / "data")) / args.kg
    caches = {int(h): Path(d) for h, d in (item.split("=", 1) for item in args.cache)}
    every = {}
    with open(data / "dev.jsonl") as f:
        for line in f:
            every[json.loads(line)["id"]] = "all"
    rows, table = {}, []
    for hops, cache in sorted(caches.items()):
        name = f"paths-{hops}-steps"
        row = run_row(name, data, args.runs / args.kg / name, every, args.reuse, hop_row(hops, cache, data))
        row.pop("env", None)
        row = json.loads(json.dumps(row).replace(str(cache), f"$CACHE_{hops}_STEPS"))
        row["bound"] = bound(data, hops)
        rows[name] = row
        got, limit = row["by_kind"]["all"], row["bound"]
        table.append([hops, got["n"], *(f"{100 * got[m]:.2f}" for m in ("hit", "hit_at_1", "f1")),
                      *(f"{100 * limit[m]:.1f}" for m in ("hit", "hit_at_1", "f1"))])
    meta = {**run_metadata(), "load_average": [round(x, 2) for x in os.getloadavg()]}
    md = (f"{args.kg} dev, every question, percent: the pattern planner trained with `--planner.path_max_hops N`, "
          "each in its own cache folder, and the evidence bound with main paths and branches of up to N steps "
          "(any gold answer reachable / exact gold set / best F1).\n\n"
          + markdown_table(["N", "questions", "Hit", "Hit@1", "F1", "bound Hit", "bound exact", "bound F1"], table)
          + f"\n\nMachine: {meta}\n")
    write_report(args.out, f"path-hops-{args.kg}", {"meta": meta, "rows": portable_paths(rows, ROOT, data.parent)},
                 md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
