"""WorldCup2014 test accuracy per file (WC-P1, WC-P2, WC-C): oracle and pattern planners under the engine
defaults without calibration, after `stem-jax calibrate` (θ and the KG's conventions chosen on dev), and the
paper-literal preset, next to the data's own bound and the bound under the calibrated conventions.

Command (from the repo root; `stem-jax index --dataset wc2014`, `stem-jax train-planner --dataset wc2014` and
`stem-jax calibrate --dataset wc2014 --split dev --planner pattern` first; about 10 minutes on 2 CPU cores):

    STEM_DATA_DIR=../shared/data STEM_CACHE_DIR=... python experiments/wc2014_results.py --runs runs/wc2014

Each row is exactly `stem-jax eval --dataset wc2014-<file> --split test --planner P FLAGS --no-progress --out
RUNS/<file>-<P>-<slug>` (a finished run folder is re-scored, not re-traced). Writes
experiments/results/wc2014-test.{json,md}, with machine and commit.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from stem_jax.cli.main import main
from stem_jax.cli.report import markdown_table, run_metadata, write_report
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.eval.bound import data_bound, engine_bound
from stem_jax.kg.index import build_index

FILES = ("p1", "p2", "c")
VARIANTS = {  # name -> (slug, flags)
    "defaults, calibrated (θ and conventions from dev)": ("calibrated", []),
    "defaults, not calibrated (--engine.calibrated=false)": ("uncalibrated", ["--engine.calibrated=false"]),
    "paper-literal (--engine.preset=paper)": ("paper", ["--engine.preset=paper"]),
}


def _conventions(conv: dict | None) -> str:
    return ", ".join(str((conv or {}).get(k)) for k in ("direction", "used_triples", "exclude_topic"))


def _mean(summary: dict, key: str) -> float:
    return round(100 * summary["overall"]["mean"][key], 2)


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("runs/wc2014"))
    parser.add_argument("--planners", nargs="+", default=["oracle", "pattern"])
    parser.add_argument("--variants", nargs="+", default=[slug for slug, _ in VARIANTS.values()],
                        help="row slugs to run: calibrated, uncalibrated, paper")
    parser.add_argument("--files", nargs="+", default=list(FILES), help="p1 p2 c")
    parser.add_argument("--out", type=Path, default=Path("experiments/results"))
    args = parser.parse_args(argv)
    began = time.perf_counter()
    rows, results = [], {}
    for name in args.files:
        dataset = load_dataset(DatasetSpec(name=f"wc2014-{name}", split="test"))
        index = build_index(dataset.triples)
        data = data_bound(dataset.questions, index, excludes_topic=dataset.excludes_topic)
        results[name] = {"questions": len(dataset.questions), "data_bound": data, "rows": {}}
        conventions = None
        for planner in args.planners:
            for variant, (slug, flags) in VARIANTS.items():
                if slug not in args.variants:
                    continue
                out = args.runs / f"{name}-{planner}-{slug}"
                command = ["eval", "--dataset", f"wc2014-{name}", "--split", "test", "--planner", planner,
                           "--no-progress", "--out", str(out), *flags]
                if main(command) != 0:
                    raise SystemExit(f"failed: stem-jax {' '.join(command)}")
                metrics = json.loads((out / "metrics.json").read_text())
                effective = metrics.get("effective", {})
                if slug == "calibrated":
                    conventions = effective.get("conventions")
                results[name]["rows"][f"{planner}, {variant}"] = {
                    "command": "stem-jax " + " ".join(command), "overall": metrics["overall"]["mean"],
                    "theta": effective.get("theta"), "theta_source": effective.get("theta_source"),
                    "conventions": effective.get("conventions"), "calibrated": effective.get("calibrated")}
                rows.append([f"WC-{name.upper()}", planner, variant, _mean(metrics, "hit"), _mean(metrics, "hit_at_1"),
                             _mean(metrics, "f1"), effective.get("theta"), _conventions(effective.get("conventions"))])
        engine = engine_bound(dataset.questions, index, **(conventions or {}))
        results[name]["engine_bound"] = {"conventions": conventions, **(engine or {})}
        for label, bound in (("data's own bound", data), ("bound under the calibrated conventions", engine)):
            rows.append([f"WC-{name.upper()}", "", label, _mean(bound, "hit"), "", _mean(bound, "f1"), "",
                         _conventions(conventions) if "calibrated" in label else "directed, as written"])
    table = markdown_table(["file", "planner", "row", "Hit", "Hit@1", "F1", "θ", "direction, used triples, exclude topic"],
                           rows)
    payload = {"meta": run_metadata(), "seconds": time.perf_counter() - began, "results": results}
    paths = write_report(args.out, "wc2014-test", payload, table)
    print(table)
    print(f"wrote {paths[0]} and {paths[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
