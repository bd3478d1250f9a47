"""SCR and scr+rel on webqsp-r dev, trained on webqsp-r train: rows beside experiments/results/webqsp-dev.md.

    export D=$STEM_DATA_DIR/webqsp-r
    stem-jax train-scr --dataset files --data-dir $D --out runs/scr-webqsp-r --scr.steps 1000 --scr.max_steps 3
    stem-jax train-scr --dataset files --data-dir $D --out runs/scr-rel-webqsp-r --scr.steps 1000 --scr.max_steps 3 \\
        --scr.relation_aware=true
    python experiments/webqsp_scr.py [--checkpoints runs/scr-webqsp-r,runs/scr-rel-webqsp-r]

Training reads only the train split (hash-split by question id: 90% to learn from, 10% for validation and early
stopping, as the planners). ``--scr.max_steps 3``: the training split's gold paths have at most 2 hops, plus the
stop; every other setting is ScrConfig's default (d 128, L 3, τ 0.05, neighbour cap 256, patience 4). Minutes
each on a CPU.

For each run, the search settings ``scr.min_hops`` (0 or 1) and ``scr.answer_cut`` are chosen on the same
validation questions of the train split (never on dev): the split is searched once per min_hops with every answer
kept (runs/webqsp-scr/<tag>-val-minhops<m>), the cut is swept offline, and the choice is the largest mean F1, then
Hit@1 (ties: smaller min_hops, smaller cut; the rule of experiments/scr_metaqa.py --choose). Then one
``stem-jax eval --split dev --method scr`` with the chosen settings (runs/webqsp-scr/<tag>-dev), scored over every
dev question (163: a question without a topic the loader found is a miss), as the other rows. Faithful SCR is also
run once with ``--engine.skip_mediators false`` (SCR as the paper has it: a beam may stop on a Freebase CVT and
return it) to show what the mediator rule changes. Writes experiments/results/webqsp-scr.{json,md}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from webqsp_dev import PEERS  # noqa: E402

from stem_jax.config import StemConfig  # noqa: E402
from stem_jax.eval.metrics import SplitScorer  # noqa: E402
from stem_jax.eval.report import markdown_table, portable_paths, run_metadata, write_report  # noqa: E402
from stem_jax.methods.scr.search import above_cut  # noqa: E402

CUTS = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7]
MIN_HOPS = [0, 1]
BOUND_HIT = 0.816  # gold-path bound of the KG on dev (the data's SOURCES.md), as webqsp_dev.py reports it


def tag_of(checkpoint: Path) -> str:
    spec = json.loads((checkpoint / "scr.json").read_text())["spec"]
    return "scr-rel" if spec.get("relation_aware") else "scr"


def is_mediator(name: str) -> bool:
    from stem_jax.kg.mediators import looks_like_mid

    return looks_like_mid(name)


def sweep(records: list[dict], cuts: list[float]) -> list[dict]:
    """Mean Hit / Hit@1 / F1 over the records with gold answers, per answer cut (answers kept when their score is at
    least cut x the best one's)."""
    scorer = SplitScorer()
    rows = []
    for cut in cuts:
        totals = {"hit": [], "hit_at_1": [], "f1": []}
        for r in records:
            if not r["ground_truth"]:
                continue
            scores = r.get("scores") or []
            kept = [p for p, _ in above_cut(list(zip(r["prediction"], scores, strict=True)), cut)] if scores else []
            m = scorer.strict_metrics(kept, r["ground_truth"])
            for key in totals:
                totals[key].append(m[key])
        rows.append({"cut": cut, "n": len(totals["f1"]), **{k: 100 * statistics.fmean(v) for k, v in totals.items()}})
    return rows


def validation_choice(checkpoint: Path, data: Path, runs: Path, tag: str) -> dict:
    """(min_hops, answer_cut) on the train split's hash-split validation questions (the ones train-scr held out)."""
    from stem_jax.data.splits import hash_split
    from stem_jax.engine import Engine
    from stem_jax.eval.loop import evaluate_method

    candidates, seconds = [], {}
    for min_hops in MIN_HOPS:
        base = StemConfig()
        config = dataclasses.replace(base, scr=dataclasses.replace(base.scr, min_hops=min_hops, answer_cut=0.0))
        engine = Engine.open("files", data_dir=data, split="train", config=config, planner="oracle",  # unused
                             method_options={"scr": {"checkpoint": checkpoint}})
        questions = hash_split(engine.dataset.questions, 0.1)[1]
        out = runs / f"{tag}-val-minhops{min_hops}"
        summary = evaluate_method(engine.method("scr"), questions, out, chunk_size=config.engine.chunk_questions,
                                  show_progress=False, log=lambda _: None)
        seconds[min_hops] = summary.get("prepare_seconds")
        records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines() if line.strip()]
        for row in sweep(records, CUTS):
            candidates.append({"min_hops": min_hops, **row})
    best = max(candidates, key=lambda c: (round(c["f1"], 1), round(c["hit_at_1"], 1), -c["min_hops"], -c["cut"]))
    return {"min_hops": best["min_hops"], "answer_cut": best["cut"], "validation_questions": best["n"],
            "rule": "max mean F1, then Hit@1; ties: smaller min_hops, smaller cut",
            "candidates": [{k: round(v, 1) if isinstance(v, float) and k != "cut" else v for k, v in c.items()}
                           for c in candidates]}


def chosen_settings(name: str, data: Path, runs: Path) -> tuple[Path, str, dict, dict, list[str]]:
    """A train-scr run folder (relative to the repo root unless absolute): its path, tag, training summary, the
    settings chosen on its validation questions and the eval flags that apply them."""
    checkpoint = (ROOT / name) if not Path(name).is_absolute() else Path(name)
    tag = tag_of(checkpoint)
    train = json.loads((checkpoint / "train-scr.json").read_text())
    choice = validation_choice(checkpoint, data, runs, tag)
    flags = ["--scr.min_hops", str(choice["min_hops"]), "--scr.answer_cut", str(choice["answer_cut"])]
    return checkpoint, tag, train, choice, flags


def dev_row(checkpoint: Path, data: Path, out: Path, flags: list[str]) -> dict:
    command = [sys.executable, "-m", "stem_jax.cli.main", "eval", "--dataset", "files", "--data-dir", str(data),
               "--split", "dev", "--out", str(out), "--no-progress", "--method", "scr", "--scr-checkpoint",
               str(checkpoint), *flags]
    subprocess.run([*command, "--overwrite"], check=True, env=os.environ.copy())
    metrics = json.loads((out / "metrics.json").read_text())
    every = metrics["all_questions"]
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines() if line.strip()]
    return {"command": "stem-jax " + " ".join(command[3:]), "folder": str(out), "n": every["n"],
            "dropped": every.get("dropped", {}),
            "hit": every["mean"]["hit"], "hit_at_1": every["mean"]["hit_at_1"], "f1": every["mean"]["f1"],
            "mediators_returned": sum(1 for r in records for p in r["prediction"] if is_mediator(p)),
            "questions_with_a_mediator_answer": sum(1 for r in records if any(map(is_mediator, r["prediction"]))),
            "mediator_ends_dropped": sum(r.get("scr_mediator_ends", 0) for r in records),
            "skipped_topic_not_in_kg": sum(1 for r in records if r.get("scr_skip")),
            "search_ms_median": statistics.median(r["ms"].get("search", 0.0) for r in records),
            "method": metrics.get("method")}


def question_kinds(data: Path) -> tuple[dict[str, str], dict[str, bool]]:
    """Per dev question id: what its gold path asks of the KG (1 hop; 2 hops through a mediator; 2 hops without
    one; no usable gold path; no topic entity), and whether its topic is a hub whose neighbours SCR samples
    (more than the neighbour cap, 256, distinct neighbours)."""
    import numpy as np

    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.kg.index import build_index
    from stem_jax.kg.mediators import mediator_mask
    from stem_jax.kg.paths import walk_relation_path

    dataset = load_dataset(DatasetSpec(name="files", data_dir=data, split="dev"))
    index = build_index(dataset.triples)
    mediators = mediator_mask(index.entities, dataset.entity_names)
    pairs = np.unique(np.concatenate([index.triples[:, [0, 2]], index.triples[:, [2, 0]]]), axis=0)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    neighbours = np.bincount(pairs[:, 0], minlength=index.num_entities)
    kinds, hubs = {}, {}
    for q in dataset.questions:
        topic = index.entity_ids[q.topic_entities[0]]
        hubs[q.qid] = bool(neighbours[topic] > StemConfig().scr.neighbours)
        if not q.gold_path:
            kinds[q.qid] = "no gold path (none given, or a relation the KG lacks)"
        elif len(q.gold_path) == 1:
            kinds[q.qid] = "1 hop"
        else:
            middle, _ = walk_relation_path(index, topic, q.gold_path[:1])
            through = middle.size and mediators[middle].any()
            kinds[q.qid] = f"{len(q.gold_path)} hops " + ("through a mediator" if through else "without a mediator")
    for qid, _, _ in dataset.dropped:
        kinds[qid], hubs[qid] = "no topic entity (a miss)", False
    return kinds, hubs


def breakdown(rows: dict, kinds: dict[str, str], hubs: dict[str, bool], runs: dict[str, Path]) -> list[list]:
    """Hit@1 per question kind (and for hub topics) for each row's dev predictions (a question without a record is
    a miss)."""
    scorer = SplitScorer()
    hit1: dict[str, dict[str, float]] = {}
    for label, folder in runs.items():
        records = {}
        for line in (folder / "predictions.jsonl").read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                records[r["id"]] = r
        hit1[label] = {qid: (scorer.strict_metrics(records[qid]["prediction"], records[qid]["ground_truth"])["hit_at_1"]
                             if qid in records else 0.0) for qid in kinds}
    groups = {kind: [q for q in kinds if kinds[q] == kind] for kind in sorted(set(kinds.values()))}
    groups[f"topic is a hub SCR samples (> {StemConfig().scr.neighbours} neighbours)"] = [q for q in kinds if hubs[q]]
    return [[kind, len(qids), *(f"{100 * statistics.fmean(hit1[label][q] for q in qids):.1f}" if qids else ""
                                for label in runs)] for kind, qids in groups.items()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", default="runs/scr-webqsp-r,runs/scr-rel-webqsp-r")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "webqsp-scr")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--stem-runs", dest="stem_runs", type=Path, default=ROOT / "runs" / "webqsp-dev",
                        help="webqsp_dev.py's run folders: the default row's predictions join the per-kind table")
    args = parser.parse_args()
    data = Path(os.environ.get("STEM_DATA_DIR", ROOT.parent / "shared" / "data")) / "webqsp-r"
    rows, table = {}, []
    for name in args.checkpoints.split(","):
        checkpoint, tag, train, choice, flags = chosen_settings(name, data, args.runs)
        row = dev_row(checkpoint, data, args.runs / f"{tag}-dev", flags)
        label = "scr+rel" if tag == "scr-rel" else "SCR (faithful)"
        rows[label] = {**row, "checkpoint": name, "choice": choice,
                       "training": {"seconds": train.get("seconds"), "steps": train.get("steps"),
                                    "best_step": (train.get("best") or {}).get("step"),
                                    "best_val_step_accuracy": (train.get("best") or {}).get("val_accuracy"),
                                    "stopped_early": train.get("stopped_early"), "skipped": train.get("skipped"),
                                    "params_sha": train.get("params_sha"), "usable_train": train.get("usable_train"),
                                    "usable_val": train.get("usable_val"),
                                    "command": train.get("command"), "scr": train.get("config", {}).get("scr")}}
        if tag == "scr":  # the paper as written: no mediator rule
            off = dev_row(checkpoint, data, args.runs / f"{tag}-dev-mediators-kept",
                          [*flags, "--engine.skip_mediators", "false"])
            rows["SCR (faithful), mediator rule off"] = {**off, "checkpoint": name, "choice": choice}
    for label, r in rows.items():
        t = r.get("training") or {}
        settings = f"min_hops {r['choice']['min_hops']}, cut {r['choice']['answer_cut']:g}"
        trained = (f"{t['seconds']:.0f} s, best step {t['best_step']} of {t['steps']}" if t else "as above")
        table.append([label, f"{100 * r['hit']:.1f}", f"{100 * r['hit_at_1']:.1f}", f"{100 * r['f1']:.1f}", r["n"],
                      r["mediators_returned"], settings, trained])
    table += [[f"{peer} (published)", *map(str, figures), 163, "", "", ""] for peer, figures in PEERS.items()]
    md = ("webqsp-r dev, every question (a question without a topic the loader found is a miss); percent. SCR trained "
          "on webqsp-r train (its hash-split validation tenth for early stopping and for choosing min_hops and the "
          f"answer cut; dev never used for a choice). Gold-path bound of the KG on dev: {100 * BOUND_HIT:.1f}% Hit "
          "(SOURCES.md). The STEM, SAFE and RoG rows are in webqsp-dev.md.\n\n"
          + markdown_table(["row", "Hit", "Hit@1", "F1", "questions", "mediators returned", "search settings",
                            "training"], table))
    folders = {label: Path(r["folder"]) for label, r in rows.items()}
    default = args.stem_runs / "pattern" / "predictions.jsonl"
    if default.is_file():  # the default STEM row of webqsp_dev.py, question by question
        folders = {"STEM, default planner (webqsp_dev.py)": default.parent, **folders}
    kinds, hubs = question_kinds(data)
    kind_rows = breakdown(rows, kinds, hubs, folders)
    md += ("\n\nHit@1 by what the question's gold path asks of the KG (all 163 dev questions; mediator = a Freebase "
           "CVT join node):\n\n" + markdown_table(["questions", "n", *folders], kind_rows))
    md += "\n\nValidation choice (train split's held-out tenth; mean over its questions with gold answers):\n\n"
    for label, r in rows.items():
        if "training" not in r:
            continue
        md += f"{label}:\n\n" + markdown_table(["min_hops", "cut", "questions", "Hit", "Hit@1", "F1"], [
            [c["min_hops"], f"{c['cut']:g}", c["n"], *(f"{c[k]:.1f}" for k in ("hit", "hit_at_1", "f1"))]
            for c in r["choice"]["candidates"]]) + "\n\n"
    rows = portable_paths(rows, ROOT, data.parent)
    write_report(args.out, "webqsp-scr", {"meta": run_metadata(), "rows": rows, "peers": PEERS,
                                          "bound_hit": BOUND_HIT, "hit_at_1_by_kind": kind_rows,
                                          "kind_columns": list(folders)}, md.rstrip() + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
