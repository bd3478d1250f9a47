"""Hit@1 and F1 with the KG's schema-step table read online against every schema text encoded, same questions.

    STEM_DATA_DIR=../shared/data python experiments/encoder_step_table_accuracy.py [--per-hop 1000]

For each KG (the demo KG's test split, MetaQA test ``--per-hop`` questions of each hop taken at an even stride
(0: every question), WorldCup2014 test P1 + P2 + C) and ``encoder.step_table_max`` 0 (no table: every schema text
encoded) and the default (the KG's step table, stem_jax/encoder/step_table.py): one engine (pattern planner,
defaults otherwise) whose schema-text table is made online (no disk cache of the split's texts), as a served
question's is, so every schema text is either encoded by the online forward (bfloat16 matmuls) or read from the
step table (float32 forwards stored as float16). Records per hop group Hit@1 and F1 of both, their difference,
and the share of questions whose ranked answers are identical. Writes
``experiments/results/encoder-step-table-accuracy.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stem_jax.cli.report import markdown_table, run_metadata, write_report  # noqa: E402
from stem_jax.config import StemConfig, apply_overrides, default_data_dir  # noqa: E402
from stem_jax.engine import Engine  # noqa: E402

SETTINGS = ("0", str(StemConfig().encoder.step_table_max))  # no step table, the default table
BOUND = 0.1  # points of Hit@1 / F1 the step table may lose ...
BOUND_PER_HOP = ("metaqa",)  # ... on each hop group of these KGs, and on the whole of every other KG


def sample(questions: list, per_hop: int | None) -> list:
    if per_hop is None:
        return list(questions)
    chosen = []
    for hop in sorted({q.hops for q in questions}, key=lambda h: (h is None, h or 0)):
        group = [q for q in questions if q.hops == hop]
        stride = max(1, len(group) // per_hop)
        chosen += group[::stride][:per_hop]
    return chosen


GNN_WEBQSP = ROOT / "runs" / "gnn-webqsp-r"


def open_args(dataset: str) -> tuple[str, dict]:
    """(dataset name, Engine.open keyword arguments) of an entry of ``--datasets``."""
    if dataset == "metaqa":
        return "metaqa", {"hops": (1, 2, 3)}
    if dataset.startswith("webqsp-r"):
        if default_data_dir() is None:
            raise SystemExit("webqsp-r needs STEM_DATA_DIR (the folder holding webqsp-r/)")
        fields = {"data_dir": default_data_dir() / "webqsp-r", "split": "dev"}
        if dataset.endswith("+gnn"):
            fields["guidance"] = GNN_WEBQSP
        return "files", fields
    return dataset, {}


def run(dataset: str, table: str, per_hop: int | None, out: Path) -> tuple[dict, dict]:
    config = apply_overrides(StemConfig(), {"encoder.step_table_max": table})
    name, fields = open_args(dataset)
    engine = Engine.open(name, config=config, planner="pattern", **fields)
    engine.method("stem").pipeline.cache_dir = None  # schema texts made online: encoded or read from the table
    questions = sample(engine.dataset.questions, per_hop)
    metrics = engine.evaluate(out, questions=questions, show_progress=False, overwrite=True)
    predictions = {}
    with open(out / "predictions.jsonl") as f:
        for line in f:
            record = json.loads(line)
            predictions[record["id"]] = record["prediction"]
    return metrics, predictions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-hop", type=int, default=1000, help="MetaQA questions per hop (0: all)")
    parser.add_argument("--datasets", default="demo,metaqa,wc2014")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args()
    results, rows, worst, worst_bound = {}, [], 0.0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in args.datasets.split(","):
            if dataset.endswith("+gnn") and not GNN_WEBQSP.is_dir():
                print(f"{dataset}: skipped, no GNN checkpoint in runs/{GNN_WEBQSP.name}", flush=True)
                continue
            per_hop = args.per_hop if dataset == "metaqa" and args.per_hop else None
            got = {table: run(dataset, table, per_hop, Path(tmp) / f"{dataset}-{table}") for table in SETTINGS}
            (m32, p32), (m16, p16) = got[SETTINGS[0]], got[SETTINGS[1]]
            same = sum(p16.get(k) == v for k, v in p32.items())
            groups = {}
            # the scorer's group "all" holds the questions of unknown hops; "overall" is every question
            for key in [*m32["groups"], None]:
                name = "overall" if key is None else "hops unknown" if key == "all" else key
                a = m32["overall"] if key is None else m32["groups"][key]
                b = m16["overall"] if key is None else m16["groups"][key]
                cell = {"n": a["n"]}
                bound_here = (key is not None) == (dataset in BOUND_PER_HOP)
                for metric in ("hit_at_1", "f1"):
                    x, y = 100 * a["mean"][metric], 100 * b["mean"][metric]
                    cell[metric] = {"encoded": round(x, 3), "step_table": round(y, 3), "delta": round(y - x, 3)}
                    worst = min(worst, y - x)
                    if bound_here:
                        worst_bound = min(worst_bound, y - x)
                groups[name] = cell
                rows.append([dataset, name, cell["n"], cell["hit_at_1"]["encoded"], cell["hit_at_1"]["step_table"],
                             cell["hit_at_1"]["delta"], cell["f1"]["encoded"], cell["f1"]["step_table"],
                             cell["f1"]["delta"]])
            results[dataset] = {"questions": len(p32), "identical_predictions": same, "groups": groups,
                                "per_hop": per_hop}
            rows.append([dataset, "identical ranked answers", f"{same} of {len(p32)}", "", "", "", "", "", ""])
            print(markdown_table(["dataset", "group", "n", "Hit@1 enc.", "Hit@1 table", "Δ", "F1 enc.", "F1 table", "Δ"],
                                 rows), flush=True)
    table = markdown_table(["dataset", "group", "questions", "Hit@1 encoded", "Hit@1 step table", "Δ Hit@1",
                            "F1 encoded", "F1 step table", "Δ F1"], rows)
    held = worst_bound >= -BOUND
    verdict = (f"Largest drop where the bound applies (MetaQA each hop, every other KG as a whole): "
               f"{max(0.0, -worst_bound):.3f} points, " + ("within" if held else "NOT within")
               + f" the {BOUND}-point bound. Largest drop in any group: {max(0.0, -worst):.3f} points.")
    meta = run_metadata()
    command = "python experiments/encoder_step_table_accuracy.py " + " ".join(sys.argv[1:])
    payload = {"meta": meta, "command": command.strip(), "bound_points": BOUND, "held": held,
               "largest_drop_bound_points": round(max(0.0, -worst_bound), 3),
               "largest_drop_any_group_points": round(max(0.0, -worst), 3), "datasets": results}
    write_report(args.out, "encoder-step-table-accuracy", payload,
                 f"Command: `{payload['command']}`\n\nMachine: {meta}\n\nPattern planner, defaults otherwise; "
                 "schema texts made online: every one encoded (encoder.step_table_max=0) or, with the default, "
                 "those naming an entity read from the KG's step table; questions encoded in both. Hit@1 and F1 "
                 "in percent.\n\n"
                 f"{table}\n\n{verdict}\n")
    print(verdict)
    return 0 if held else 1


if __name__ == "__main__":
    raise SystemExit(main())
