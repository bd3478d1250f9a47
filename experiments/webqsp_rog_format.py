"""webqsp-r in RoG's file format: does `--dataset rog` give the numbers `--dataset files` gives?

    STEM_DATA_DIR=../shared/data python experiments/webqsp_rog_format.py

Writes webqsp-r's train and dev splits as RoG-format JSONL (`stem_jax.kg.subgraph.write_rog`: each question's graph is
its topic's 2-hop neighbourhood in the KG, hubs over 2,000 triples reached but not expanded, the gold path kept)
under ``runs/webqsp-r-rog/`` (data, never committed), then runs README's "your own KG" path on it
(`index`, `train-planner`, `eval --split dev`, defaults) and sets the dev metrics over every question beside the
`files` run's (`runs/webqsp-dev/pattern` from `experiments/webqsp_dev.py`, which must exist). Writes
``experiments/results/webqsp-rog-format.{json,md}``. Tens of minutes on a CPU (two KG indexes and a
planner training).
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
from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402
from stem_jax.kg.subgraph import write_rog  # noqa: E402


def stem(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "stem_jax.cli.main", *args], check=True, env=os.environ.copy())


def every_question(run: Path) -> dict:
    metrics = json.loads((run / "metrics.json").read_text())
    every = metrics.get("all_questions") or {"mean": metrics["overall"]["mean"], "n": metrics["overall"]["n"]}
    return {"n": every["n"], **{k: every["mean"][k] for k in ("hit", "hit_at_1", "f1")}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "webqsp-r-rog")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--report-only", action="store_true", help="rebuild the report from the run folders")
    args = parser.parse_args()
    data = Path(os.environ.get("STEM_DATA_DIR", ROOT.parent / "shared" / "data")) / "webqsp-r"
    exported_file = args.work / "exported.json"
    if not args.report_only:
        exported = {}
        for split in ("train", "dev"):
            dataset = load_dataset(DatasetSpec(name="files", data_dir=data, split=split))
            exported[split] = write_rog(args.work / f"{split}.jsonl", dataset)
            print(f"{split}: {exported[split]}", flush=True)
        exported_file.write_text(json.dumps(exported))
        rog = ["--dataset", "rog", "--rog-path", str(args.work), "--no-progress"]
        stem("index", *rog, "--split", "train")
        stem("index", *rog, "--split", "dev")
        stem("train-planner", *rog, "--split", "train")
        stem("eval", *rog, "--split", "dev", "--planner", "pattern", "--out", str(args.work / "eval-dev"), "--overwrite")
    exported = json.loads(exported_file.read_text())
    rows = {"rog format": every_question(args.work / "eval-dev")}
    files_run = ROOT / "runs" / "webqsp-dev" / "pattern"
    if (files_run / "metrics.json").exists():
        rows["files format"] = every_question(files_run)
        # the export holds the questions the files loader kept: count the ones it dropped as misses here too
        whole, part = rows["files format"]["n"], rows["rog format"]["n"]
        rows["rog format, over every question"] = {
            "n": whole, **{k: rows["rog format"][k] * part / whole for k in ("hit", "hit_at_1", "f1")}}
    table = [[name, f"{100 * r['hit']:.1f}", f"{100 * r['hit_at_1']:.1f}", f"{100 * r['f1']:.1f}", r["n"]]
             for name, r in rows.items()]
    md = ("webqsp-r dev through `--dataset rog` (exported: each question's graph its topic's 2-hop neighbourhood) "
          "and through `--dataset files`, default engine and planner, every question; percent.\n\n"
          + markdown_table(["format", "Hit", "Hit@1", "F1", "questions"], table)
          + f"\n\nExported questions: train {exported['train']}, dev {exported['dev']} (left_out: no topic in the KG).")
    write_report(args.out, "webqsp-rog-format", {"meta": run_metadata(), "rows": rows, "exported": exported}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
