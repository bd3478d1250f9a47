"""MetaQA-partial full test split, end to end with the `pattern` planner, next to the oracle's rows.

Command (from the repo root; needs `stem-jax index --dataset metaqa`, `stem-jax train-planner --dataset metaqa`
and experiments/results/metaqa-oracle.json from experiments/metaqa_oracle.py):

    STEM_DATA_DIR=../shared/data python experiments/planner_metaqa_full.py

Minutes per variant on a CPU (experiment_wall_seconds in the JSON).
Each variant is exactly `stem-jax eval --dataset metaqa --split test --hops 1,2,3 --planner pattern FLAGS`;
run folders go to runs/metaqa-pattern-*. Writes experiments/results/planner-metaqa-full.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from paper_common import run_command

from stem_jax.eval.report import markdown_table, run_metadata, write_report

VARIANTS = {
    "pattern B=1, paper defaults": ["--planner.beam=1"],
    "pattern B=1, relation bonus": ["--planner.beam=1", "--engine.relation_bonus=true"],
    "pattern B=4, relation bonus": ["--engine.relation_bonus=true"],
}
ORACLE = {"paper defaults": "oracle, paper defaults", "relation bonus": "oracle, relation bonus"}


def main_experiment(argv: list[str] | None = None) -> int:
    # no options: the parser gives `--help` (and refuses stray arguments) instead of starting the runs
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    results, rows = {}, []
    oracle_path = Path("experiments/results/metaqa-oracle.json")
    if oracle_path.is_file():
        for name, metrics in json.loads(oracle_path.read_text())["variants"].items():
            results[ORACLE.get(name, f"oracle, {name}")] = metrics
    for name, flags in VARIANTS.items():
        out = Path("runs") / f"metaqa-pattern-{name.replace(' ', '').replace(',', '-').replace('=', '')}"
        argv = ["eval", "--dataset", "metaqa", "--split", "test", "--hops", "1,2,3", "--planner", "pattern",
                "--no-progress", *flags, "--out", str(out)]
        metrics = run_command(argv, out / "metrics.json", "experiment_wall_seconds")
        if metrics is None:
            return 1
        results[name] = metrics
    for name, metrics in results.items():
        info = metrics.get("planner_info", {})
        rate = info.get("plan_questions_per_second")
        for hop, stats in {**metrics["groups"], "all": metrics["overall"]}.items():
            mean = stats["mean"]
            rows.append([name, hop, stats["n"], round(100 * mean["hit_at_1"], 2), round(100 * mean["f1"], 2),
                         round(100 * mean["hit"], 2), round(100 * mean.get("coverage", float("nan")), 2),
                         round(rate) if rate and hop == "all" else ""])
    table = markdown_table(["variant", "hops", "questions", "Hit@1", "F1", "Hit", "Coverage", "planning q/s"], rows)
    print(table)
    meta = run_metadata()
    text = (f"Command: `STEM_DATA_DIR=../shared/data python experiments/planner_metaqa_full.py`  \n"
            f"Machine: {meta['machine']}, {meta['cpu_count']} CPUs, jax {meta['jax']}, commit {meta['commit']}\n\n"
            "MetaQA-partial test, all questions whose topic is in the partial KB; LLM-free answers. Oracle rows: "
            "experiments/results/metaqa-oracle.json. Pattern: the Flax head with the type filter, trained on MetaQA "
            "dev; planning q/s includes MiniLM encoding of the masked questions (distinct wordings once each).\n\n"
            f"{table}")
    write_report(Path("experiments/results"), "planner-metaqa-full", {"meta": meta, "variants": results}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main_experiment())
