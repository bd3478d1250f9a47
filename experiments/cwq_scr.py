"""SCR and scr+rel on cwq-e dev, trained on cwq-e train: rows beside experiments/results/cwq-dev.md.

    export D=$STEM_DATA_DIR/cwq-e
    stem-jax train-scr --dataset files --data-dir $D --out runs/scr-cwq-e --scr.steps 1000 --scr.max_steps 3
    stem-jax train-scr --dataset files --data-dir $D --out runs/scr-rel-cwq-e --scr.steps 1000 --scr.max_steps 3 \\
        --scr.relation_aware=true
    python experiments/cwq_scr.py [--checkpoints runs/scr-cwq-e,runs/scr-rel-cwq-e]

The protocol is experiments/webqsp_scr.py's: training reads only the train split (hash-split by question id, 90% to
learn from, 10% for validation and early stopping); ``scr.min_hops`` and ``scr.answer_cut`` are chosen on those
validation questions, never on dev; then one ``stem-jax eval --split dev --method scr`` per checkpoint. SCR follows
one relation path from the first topic entity, so a question's other topic entities are not used. Scored over
every dev question (353; a question without a topic the loader found is a miss) and by kind of question, as
cwq_dev.py scores the STEM rows. Writes experiments/results/cwq-scr.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from cwq_dev import KINDS, PEERS, kinds, machine, summarise  # noqa: E402
from webqsp_scr import chosen_settings, dev_row  # noqa: E402

from stem_jax.eval.metrics import SplitScorer  # noqa: E402
from stem_jax.eval.report import markdown_table, portable_paths, write_report  # noqa: E402


def by_kind(folder: Path, kind_of: dict[str, str]) -> dict[str, dict]:
    records = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines() if line.strip()]
    scorer = SplitScorer()
    return summarise({r["id"]: scorer.strict_metrics(r["prediction"], r["ground_truth"]) for r in records}, kind_of)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", default="runs/scr-cwq-e,runs/scr-rel-cwq-e")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "cwq-scr")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args()
    data = Path(os.environ.get("STEM_DATA_DIR", ROOT.parent / "shared" / "data")) / "cwq-e"
    kind_of = kinds(data)
    rows = {}
    for name in args.checkpoints.split(","):
        checkpoint, tag, train, choice, flags = chosen_settings(name, data, args.runs)
        folder = args.runs / f"{tag}-dev"
        row = dev_row(checkpoint, data, folder, flags)
        label = "scr+rel" if tag == "scr-rel" else "SCR (faithful)"
        rows[label] = {**row, **portable_paths({"command": row["command"], "folder": row["folder"]}, ROOT, data.parent),
                       "checkpoint": name, "choice": choice, "by_kind": by_kind(folder, kind_of),
                       "training": {"seconds": train.get("seconds"), "steps": train.get("steps"),
                                    "best_step": (train.get("best") or {}).get("step"),
                                    "skipped": train.get("skipped"), "params_sha": train.get("params_sha"),
                                    "command": portable_paths(str(train.get("command")), ROOT, data.parent)}}
    header = ["row", *[f"{k} ({rows[next(iter(rows))]['by_kind'][k]['n']}) {m}" for k in ("all", *KINDS)
                       for m in ("Hit", "Hit@1", "F1")], "mids returned", "settings (chosen on train's validation)"]
    table = []
    for label, r in rows.items():
        cells = [f"{100 * r['by_kind'][k][m]:.1f}" for k in ("all", *KINDS) for m in ("hit", "hit_at_1", "f1")]
        settings = f"min_hops {r['choice']['min_hops']}, cut {r['choice']['answer_cut']:g}"
        table.append([label, *cells, r["mediators_returned"], settings])
    for peer, (hit, hit1, f1) in PEERS.items():
        table.append([f"{peer} (published)", f"{hit}", f"{hit1}", f"{f1}", *[""] * 9, "", ""])
    meta = machine()
    md = ("cwq-e dev, every question (353; a question without a topic the loader found is a miss), percent, by kind "
          "of question (topic entities in the file). SCR trained on cwq-e train (its hash-split validation tenth for "
          "early stopping and for choosing min_hops and the answer cut); it follows one path from the first topic, "
          f"so other topic entities are unused. Commit {meta['commit'][:10]}, {meta['platform']}, "
          f"{meta['cpus']} CPUs, load average {', '.join(f'{x:.2f}' for x in meta['load_average'])} at {meta['date']}.\n\n" + markdown_table(header, table))
    write_report(args.out, "cwq-scr", {"machine": meta, "rows": rows}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
