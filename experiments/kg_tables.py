"""Per-KG results table (issue 21): oracle and pattern planners on a KG's test split under the paper's
conventions and under the calibrated ones, per hop, next to both bounds (the data's own and the engine's).

Commands (from the repo root; `stem-jax index --dataset D`, `stem-jax train-planner --dataset D` and, for the
calibrated rows, `stem-jax calibrate --dataset D --split dev --planner pattern` first; MetaQA ships its
calibration, θ 0.8 on dev):

    export STEM_DATA_DIR=../shared/data STEM_CACHE_DIR=.cache/stem_jax
    python experiments/kg_tables.py --dataset wc2014            # WC-P1, WC-P2, WC-C: 3 min (load 3-5) to 11 min (load 9-14)
    python experiments/kg_tables.py --dataset metaqa            # full test split, 4 evals of 38,851 questions: 41 min (load 5-11)
    python experiments/kg_tables.py --dataset demo --prepare    # the demo KG from an empty cache: 24 min (load 8-15)

``--prepare`` runs those three commands first (`stem-jax index`, `train-planner`, `calibrate --split dev
--planner pattern --limit N`) for the KG: minutes on the demo KG, far longer on MetaQA.

Rows (``--variants``):

* ``calibrated``: the engine defaults with θ and the KG's conventions (direction, used-triple rule, topic
  exclusion) read from the dev calibration stored beside the KG's embeddings (no flags);
* ``paper-conventions``: the paper's conventions, `--engine.calibrated=false` (θ 0.6, undirected matching, each
  triple once per run, topic excluded), the rest of the engine defaults unchanged;
* ``paper-literal``: `--engine.preset=paper` (also no relation bonus, cosine anchoring, topic kept, max rank);
  on by default for the small KGs only (one MetaQA paper-literal eval takes ~20 min idle).

Each row is exactly `stem-jax eval --dataset SUBSET --split test --planner P FLAGS --no-progress --out
RUNS/SUBSET-P-VARIANT` (a finished run folder is re-scored, not re-traced, so an interrupted table resumes).
Bounds: the data's own bound (gold path walked as written, directed) and the bound under each set of
conventions a row used (`stem_jax.eval.bound`; the same numbers `stem-jax data-stats` prints). Nothing is tuned
here: θ and conventions come only from dev. Writes experiments/results/kg-<dataset>-test.{json,md} with machine,
load average, commit and the wall time of every row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from stem_jax.cli.main import main
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.eval.bound import data_bound, engine_bound
from stem_jax.eval.report import markdown_table, run_metadata, write_report
from stem_jax.kg.index import build_index

SUBSETS = {  # --dataset -> (eval dataset name, label) per table section
    "metaqa": (("metaqa", "MetaQA-partial"),),
    "wc2014": (("wc2014-p1", "WC-P1"), ("wc2014-p2", "WC-P2"), ("wc2014-c", "WC-C")),
    "demo": (("demo", "demo KG"),),
}
VARIANTS = {  # slug -> (row label, eval flags)
    "calibrated": ("calibrated (θ and conventions from dev)", []),
    "paper-conventions": ("paper's conventions (--engine.calibrated=false)", ["--engine.calibrated=false"]),
    "paper-literal": ("paper-literal (--engine.preset=paper)", ["--engine.preset=paper"]),
}
DEFAULT_VARIANTS = {"metaqa": ("calibrated", "paper-conventions")}
PREPARE_NAME = {"metaqa": "metaqa", "wc2014": "wc2014", "demo": "demo"}  # the subsets share one KB and its caches
CONVENTION_KEYS = ("direction", "used_triples", "exclude_topic")


def _conventions_label(conv: dict[str, Any] | None) -> str:
    return ", ".join(str((conv or {}).get(k)) for k in CONVENTION_KEYS)


def _pct(value: float | None) -> str:
    # strings: markdown_table pads floats to three decimals ("98.780"); percent with two decimals reads better
    return "" if value is None else f"{100 * value:.2f}"


def _groups(summary: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(group, {"n", "mean"}) per hop, then "all" when there is more than one hop."""
    groups = sorted(summary.get("groups", {}).items())
    if len(groups) > 1:
        groups.append(("all", summary["overall"]))
    return groups


def _run_eval(subset: str, planner: str, slug: str, runs: Path) -> tuple[dict[str, Any], list[str], float, dict]:
    """One eval; also says whether it only re-scored a finished folder, and the wall time recorded before."""
    out = runs / f"{subset}-{planner}-{slug}"
    before = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").is_file() else None
    command = ["eval", "--dataset", subset, "--split", "test", "--planner", planner, "--no-progress",
               "--out", str(out), *VARIANTS[slug][1]]
    began = time.perf_counter()
    if main(command) != 0:
        raise SystemExit(f"kg_tables: `stem-jax {' '.join(command)}` failed; fix the error above and re-run "
                         f"(finished run folders under {runs} are reused)")
    previous = {"rescored": before is not None,
                "previous_wall_seconds": before.get("wall_seconds") if before else None}
    return json.loads((out / "metrics.json").read_text()), command, time.perf_counter() - began, previous


def prepare(dataset: str, limit: int) -> list[str]:
    """Index the KG, train its pattern planner and calibrate θ and conventions on dev; returns the commands."""
    name = PREPARE_NAME[dataset]
    commands = [["index", "--dataset", name, "--no-progress"], ["train-planner", "--dataset", name],
                ["calibrate", "--dataset", name, "--split", "dev", "--planner", "pattern", "--limit", str(limit),
                 "--no-progress"]]
    for command in commands:
        if main(command) != 0:
            raise SystemExit(f"kg_tables --prepare: `stem-jax {' '.join(command)}` failed; see the error above")
    return ["stem-jax " + " ".join(c) for c in commands]


def build_tables(dataset: str, planners: list[str], variants: list[str], runs: Path) -> tuple[dict, list[list]]:
    """Run (or re-score) every eval of ``dataset`` and compute its bounds; returns (results, markdown rows)."""
    results: dict[str, Any] = {}
    rows: list[list] = []
    for subset, label in SUBSETS[dataset]:
        data = load_dataset(DatasetSpec(name=subset, split="test"))
        index = build_index(data.triples)
        names = data.entity_names
        section: dict[str, Any] = {"questions": len(data.questions), "rows": {}, "bounds": {}}
        used: dict[str, dict[str, Any]] = {}  # conventions label -> conventions, for the engine bounds
        used_by: dict[str, list[str]] = {}
        for planner in planners:
            for slug in variants:
                metrics, command, seconds, previous = _run_eval(subset, planner, slug, runs)
                effective = metrics.get("effective", {})
                conv = effective.get("conventions") or {}
                if effective.get("calibration"):  # where θ/conventions came from (no path: it names this machine)
                    found = effective["calibration"]
                    section["calibration"] = {k: found.get(k) for k in ("theta", "split", "questions", "conventions",
                                                                         "source") if found.get(k) is not None}
                    # the calibrations this project measured ship with the package and name their source
                    section["calibration"]["shipped"] = "source" in found
                key = _conventions_label(conv)
                used.setdefault(key, conv)
                used_by.setdefault(key, []).append(slug)
                section["rows"][f"{planner}/{slug}"] = {
                    "command": "stem-jax " + " ".join(command), "seconds_this_call": round(seconds, 1), **previous,
                    "eval_wall_seconds": metrics.get("wall_seconds"), "theta": effective.get("theta"),
                    "theta_source": effective.get("theta_source"), "calibrated": effective.get("calibrated"),
                    "conventions": conv, "conventions_source": effective.get("conventions_source"),
                    "overall": metrics["overall"]["mean"],
                    "groups": {g: s["mean"] for g, s in metrics.get("groups", {}).items()},
                    "run_commit": (metrics.get("meta") or {}).get("commit")}
                for group, summary in _groups(metrics):
                    mean = summary["mean"]
                    rows.append([label, group, planner, VARIANTS[slug][0], summary.get("n", ""), _pct(mean["hit"]),
                                 _pct(mean["hit_at_1"]), _pct(mean["f1"]), str(effective.get("theta")), key])
        bound = data_bound(data.questions, index, names, excludes_topic=data.excludes_topic)
        section["bounds"]["data"] = {"label": "data's own bound (gold path as written, directed)"
                                     + (", topic dropped as the data's answers never include it"
                                        if data.excludes_topic else ""), **(bound or {})}
        labelled = [("data's own bound (directed gold path)", "directed, as written", bound)]
        for key, conv in used.items():
            engine = engine_bound(data.questions, index, names, **conv)
            section["bounds"][f"engine: {key}"] = {"conventions": conv, "rows": used_by[key], **(engine or {})}
            labelled.append((f"bound under the engine's conventions (rows: {', '.join(sorted(set(used_by[key])))})",
                             key, engine))
        for name, conv_label, summary in labelled:
            if summary is None:
                rows.append([label, "all", "", name, "", "no gold paths", "", "", "", conv_label])
                continue
            for group, s in _groups(summary):
                rows.append([label, group, "", name, s.get("n", ""), _pct(s["mean"]["hit"]), "",
                             _pct(s["mean"]["f1"]), "", conv_label])
        results[label] = section
    return results, rows


def calibration_notes(results: dict[str, Any]) -> str:
    """One line per KG: the dev calibration its calibrated rows used."""
    lines = []
    for label, section in results.items():
        cal = section.get("calibration")
        if cal:
            where = (f"shipped with the package (`stem-jax calibrate`, sweep in {cal['source']})" if cal.get("shipped")
                     else "`stem-jax calibrate`, stored beside the embeddings")
            lines.append(f"- {label}: θ {cal.get('theta')} and conventions ({_conventions_label(cal.get('conventions'))})"
                         f" chosen on {cal.get('questions')} {cal.get('split')} questions, {where}")
        else:
            lines.append(f"- {label}: no stored calibration applied; the calibrated rows ran at the config's values")
    return "Calibration used by the calibrated rows:\n\n" + "\n".join(lines) + "\n"


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, choices=sorted(SUBSETS), help="which KG's table")
    parser.add_argument("--runs", type=Path, default=None,
                        help="run folders (default runs/kg-tables/<dataset>, relative to the working directory)")
    parser.add_argument("--planners", nargs="+", default=["oracle", "pattern"], choices=["oracle", "pattern"])
    parser.add_argument("--variants", nargs="+", default=None, choices=list(VARIANTS),
                        help="rows to run (default: all three; MetaQA: calibrated paper-conventions)")
    parser.add_argument("--out", type=Path, default=Path("experiments/results"))
    parser.add_argument("--prepare", action="store_true",
                        help="first run stem-jax index, train-planner and calibrate (dev) for this KG")
    parser.add_argument("--calibrate-limit", type=int, default=150, help="dev questions per hop for --prepare")
    args = parser.parse_args(argv)
    variants = args.variants or list(DEFAULT_VARIANTS.get(args.dataset, VARIANTS))
    runs = args.runs or Path("runs/kg-tables") / args.dataset
    began = time.perf_counter()
    load_before = os.getloadavg()
    prepared = prepare(args.dataset, args.calibrate_limit) if args.prepare else []
    results, rows = build_tables(args.dataset, args.planners, variants, runs)
    rescored = sum(r.get("rescored", False) for sec in results.values() for r in sec["rows"].values())
    total = sum(len(sec["rows"]) for sec in results.values())
    meta = run_metadata() | {"load_average_1_5_15_start": [round(x, 2) for x in load_before],
                             "load_average_1_5_15_end": [round(x, 2) for x in os.getloadavg()]}
    table = markdown_table(["KG", "hops", "planner", "row", "questions", "Hit", "Hit@1", "F1", "θ",
                            "direction, used triples, exclude topic"], rows)
    command = "python experiments/kg_tables.py " + " ".join(argv if argv is not None else sys.argv[1:])
    header = (f"Command: `{command}`  \nMachine: {meta['machine']}, {meta['cpu_count']} CPUs, {meta['backend']}, "
              f"jax {meta['jax']}, commit {meta['commit']}, load average at start {meta['load_average_1_5_15_start']}"
              f" / end {meta['load_average_1_5_15_end']}, {time.perf_counter() - began:.0f} s"
              + (f" ({rescored} of {total} rows re-scored from finished run folders, their trace time not included;"
                 " `previous_wall_seconds` in the JSON)" if rescored else "") + "\n\n"
              "Test split, percent. θ and the conventions of the calibrated rows come from the dev calibration "
              "stored beside the KG's embeddings (`stem-jax calibrate`); the paper's conventions are θ 0.6, "
              "undirected matching, each triple once per run, topic excluded. Bounds need no planner or encoder.\n")
    payload = {"meta": meta, "command": command, "seconds": time.perf_counter() - began, "variants": variants, "prepared": prepared,
               "results": results}
    paths = write_report(args.out, f"kg-{args.dataset}-test", payload,
                         header + "\n" + table + "\n\n" + calibration_notes(results))
    print(table)
    print(f"wrote {paths[0]} and {paths[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
