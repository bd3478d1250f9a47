"""Zero-shot planning measured honestly: leave one KG family out, evaluate the planner trained on the others.

    STEM_DATA_DIR=../shared/data python experiments/train_pretrained_planner.py --no-full --leave-one-out LOFO
    STEM_DATA_DIR=../shared/data python experiments/zero_shot.py --models LOFO [--only metaqa,demo]

Each row is one ``stem-jax eval --planner pattern --planner-path LOFO/<family>`` with the engine's defaults
otherwise (no calibration on the left-out KG): MetaQA test (the first ``--metaqa-limit`` questions of each hop),
WorldCup2014 test per question file (P1, P2, C), the demo KG's test split, webqsp-r dev and cwq-e dev. The
trained rows beside them are the fully trained default's, from ``experiments/results/default-accuracy.md``
(MetaQA over its whole test split), ``webqsp-dev.md`` and ``cwq-dev.md``, or run here (the demo KG).
Writes ``experiments/results/zero-shot.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402

# (row, family left out, eval flags, trained default's Hit@1 and where it comes from)
ROWS = [
    ("demo test", "demo", ["--dataset", "demo"], None, "run here"),
    ("WorldCup2014 P1", "wc2014", ["--dataset", "wc2014-p1"], 100.0, "default-accuracy.md"),
    ("WorldCup2014 P2", "wc2014", ["--dataset", "wc2014-p2"], 100.0, "default-accuracy.md"),
    ("WorldCup2014 C", "wc2014", ["--dataset", "wc2014-c"], 100.0, "default-accuracy.md"),
    ("webqsp-r dev", "freebase", ["--dataset", "files", "--data-dir", "{data}/webqsp-r", "--split", "dev"], 65.6,
     "predictions-identity-path-hops-auto.md (retrained with path_hops=auto)"),
    ("cwq-e dev", "freebase", ["--dataset", "files", "--data-dir", "{data}/cwq-e", "--split", "dev"], 55.0,
     "cwq-dev.md"),
    ("MetaQA 1-hop", "metaqa", ["--dataset", "metaqa", "--hops", "1"], 95.01, "default-accuracy.md (all 9947)"),
    ("MetaQA 2-hop", "metaqa", ["--dataset", "metaqa", "--hops", "2"], 96.59, "default-accuracy.md (all 14872)"),
    ("MetaQA 3-hop", "metaqa", ["--dataset", "metaqa", "--hops", "3"], 97.27, "default-accuracy.md (all 14274)"),
]


# an answer scorer in the KG's cache folder was trained by `train-planner` on that KG's own questions: a KG nobody
# wrote questions for has none, so rows planned without the KG's questions do not read it
NO_OWN_SCORER = ["--engine.answer_scorer", "off"]


def evaluate(flags: list[str], planner: list[str], out: Path, limit: int | None) -> dict:
    command = [sys.executable, "-m", "stem_jax.cli.main", "eval", *flags, "--planner", "pattern", *planner,
               "--out", str(out), "--no-progress", "--overwrite"] + (["--limit", str(limit)] if limit else [])
    began = time.perf_counter()
    if not (out / "metrics.json").is_file():  # a row measured by an earlier run of this script is read back
        subprocess.run(command, check=True, env=os.environ.copy(), stdout=subprocess.DEVNULL)
    metrics = json.loads((out / "metrics.json").read_text())
    every = metrics.get("all_questions", metrics["overall"])
    return {"command": "stem-jax " + " ".join(command[3:]), "n": every["n"],
            "hit_at_1": 100 * every["mean"]["hit_at_1"], "f1": 100 * every["mean"]["f1"],
            "hit": 100 * every["mean"]["hit"], "planner_info": metrics.get("planner_info"),
            "seconds": time.perf_counter() - began}


# the KG whose training questions adapt a left-out family's model, per row (few-shot rows)
TRAIN_SOURCE = {
    "MetaQA": ("metaqa", {}), "WorldCup2014": ("wc2014", {}), "demo": ("demo", {}),
    "webqsp-r": ("files", {"data_dir": "webqsp-r"}), "cwq-e": ("files", {"data_dir": "cwq-e"}),
}


def adapted_model(label: str, family: str, shots: int, models: Path, runs: Path) -> Path:
    """The left-out family's model adapted to ``shots`` training questions of the row's KG (answers only: their
    gold paths and MetaQA types are dropped), saved under ``runs``."""
    import dataclasses

    from stem_jax.config import StemConfig
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.data.sampling import sample_per_hop
    from stem_jax.data.splits import hash_split
    from stem_jax.encoder import get_encoder
    from stem_jax.plan.factory import training_split
    from stem_jax.plan.training import masked_question_embedder, save_few_shot, train_few_shot

    name, fields = TRAIN_SOURCE[label.split(" ")[0]]
    key = label.split(" ")[0].lower()
    out = runs / "models" / f"{key}-n{shots}"
    if (out / "ranker.json").is_file():
        return out
    if "data_dir" in fields:
        fields = {"data_dir": Path(os.environ["STEM_DATA_DIR"]) / fields["data_dir"]}
    spec = DatasetSpec(name=name, split=training_split(name, None), **fields)
    dataset = load_dataset(spec)
    picked = sample_per_hop(dataset.questions, shots, group=lambda q: 0)
    picked = [dataclasses.replace(q, gold_path=None, qtype=None, constraints=None) for q in picked]
    train, val = hash_split(picked, 0.1)
    config = StemConfig()
    encoder = get_encoder(config.encoder)
    cache = Path(os.environ.get("STEM_CACHE_DIR", ".cache"))
    ranker = train_few_shot(dataset, train, val, config, encoder=encoder,
                            embed=masked_question_embedder(cache, dataset.name, encoder, config), base=models / family,
                            log=lambda _: None)
    ranker.report.update(dataset=dataset.name, shots=shots)
    save_few_shot(ranker, out, base=models / family)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True, help="folder with one model per left-out family")
    parser.add_argument("--only", default=None, help="comma-separated families")
    parser.add_argument("--metaqa-limit", type=int, default=500)
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "zero-shot")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="zero-shot")
    parser.add_argument("--shots", default="", help="comma-separated N > 0: also rows adapted to N questions")
    parser.add_argument("--before", type=Path, default=None,
                        help="an earlier run's zero-shot.json: its Hit@1 per row and N as a 'before' column")
    parser.add_argument("--note", default="", help="a line under the table (machine load, models' command)")
    args = parser.parse_args()
    data = os.environ.get("STEM_DATA_DIR", "data")
    results, rows = [], []
    for label, family, flags, trained, source in ROWS:
        if args.only and family not in args.only.split(","):
            continue
        flags = [f.format(data=data) for f in flags]
        limit = args.metaqa_limit if family == "metaqa" else None
        slug = label.lower().replace(" ", "-")
        zero = evaluate(flags, ["--planner-path", str(args.models / family), *NO_OWN_SCORER], args.runs / slug, limit)
        if trained is None:  # the demo KG's default trains its planner on first use, in seconds
            run = evaluate(flags, [], args.runs / f"{slug}-trained", limit)
            trained, source = run["hit_at_1"], run["command"]
        ratio = zero["hit_at_1"] / trained if trained else None
        results.append({"row": label, "left_out": family, "shots": 0, "run": zero, "trained_hit_at_1": trained,
                        "trained_source": source, "ratio": ratio})
        rows.append([label, family, 0, zero["n"], f"{zero['hit_at_1']:.1f}", f"{zero['f1']:.1f}", f"{trained:.1f}",
                     f"{100 * ratio:.0f}%" if ratio is not None else "", source])
        print(rows[-1], flush=True)
        for shots in [int(n) for n in args.shots.split(",") if n]:
            model = adapted_model(label, family, shots, args.models, args.runs)
            run = evaluate(flags, ["--planner-path", str(model), *NO_OWN_SCORER], args.runs / f"{slug}-n{shots}", limit)
            ratio = run["hit_at_1"] / trained if trained else None
            results.append({"row": label, "left_out": family, "shots": shots, "run": run, "trained_hit_at_1": trained,
                            "trained_source": source, "ratio": ratio})
            rows.append([label, family, shots, run["n"], f"{run['hit_at_1']:.1f}", f"{run['f1']:.1f}",
                         f"{trained:.1f}", f"{100 * ratio:.0f}%" if ratio is not None else "", source])
            print(rows[-1], flush=True)
        report(args, results, rows)
    print(report(args, results, rows))
    return 0


def report(args: argparse.Namespace, results: list, rows: list) -> str:
    meta = run_metadata()
    meta["load_average_at_report"] = list(os.getloadavg())
    headers = ["KG", "left out", "N", "questions", "Hit@1", "F1", "trained Hit@1", "Hit@1 / trained",
               "trained row from"]
    if args.before is not None:  # the earlier run's Hit@1 beside each row
        earlier = {(r["row"], r["shots"]): r["run"]["hit_at_1"]
                   for r in json.loads(args.before.read_text())["results"]}
        headers.insert(5, "before")
        rows = [[*row[:5], f"{earlier[(row[0], row[2])]:.1f}" if (row[0], row[2]) in earlier else "", *row[5:]]
                for row in rows]
    md = ("Leave one KG family out, N = 0 questions of the left-out KG: `stem-jax eval --planner pattern "
          "--planner-path <model trained without that family>`, defaults otherwise; percent over every question "
          f"evaluated (MetaQA: the first {args.metaqa_limit} test questions of each hop). Trained: the fully trained "
          "default's Hit@1 (source column).\n\n"
          + "N > 0: the left-out model adapted to N training questions of that KG, answers only (gold paths and "
          "MetaQA types dropped), `train_few_shot` as `stem-jax train-planner` runs it on few questions.\n\n"
          + markdown_table(headers, rows) + (f"\n\n{args.note}\n" if args.note else ""))
    if args.note:
        meta["note"] = args.note
    write_report(args.out, args.name, {"meta": meta, "results": results}, md)
    return md


if __name__ == "__main__":
    raise SystemExit(main())
