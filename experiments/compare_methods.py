"""STEM, SAFE (planner ids; phrases + ADJ) and SCR (faithful; scr+rel) side by side on the same MetaQA-partial
questions, machine and session, with the gold-path bound.

    STEM_DATA_DIR=../shared/data nice -n 15 python experiments/compare_methods.py --per-hop 300 \
        --scr-checkpoint runs/scr26-faithful --scr-rel-checkpoint runs/scr26-rel [--gnn-checkpoint runs/gnn-metaqa]

(``--per-hop 0``: the full test split.) One :class:`stem_jax.Engine` (KG index, MiniLM tables, pattern planner)
serves every row, so data, encoder, index, planner and hardware are identical; each row writes its own
resumable run folder under --runs. The question set is a deterministic stratified subset (per hop, the N
questions with the lowest sha256(qid)) of the test split.

Every setting a row uses is either the method's default or chosen on dev, never on test, and the table says
which: SCR's ``min_hops`` and ``answer_cut`` come from the dev choice files of ``experiments/scr_metaqa.py
--choose`` (``experiments/results/scr[-rel]-metaqa-dev-choice.json``); SAFE's ``answer_margin`` and
``injective`` from ``experiments/safe_metaqa.py --split dev`` (``--safe-injective`` passes the dev decision).

Reports per hop Hit, Hit@1, F1, coverage, retrieval ms per question (median, p95, from each record's stage
timings: planning and text encoding excluded), questions/s (wall time of the evaluate call, planning
included), and per row the training data, steps and time of its learned parts (read from their run folders).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax import Engine, StemConfig
from stem_jax.cli.gnn import subset
from stem_jax.cli.report import markdown_table, run_metadata, write_report
from stem_jax.eval.bound import gold_path_bound
from stem_jax.eval.loop import evaluate_method
from stem_jax.eval.scoring import read_finished
from stem_jax.methods import build_method
from stem_jax.plan.factory import PlannerSpec

RETRIEVAL_STAGES = {"stem": ("anchor", "trace", "answer"), "safe": ("value", "adj", "match"), "scr": ("search",)}
RESULTS = Path("experiments/results")


def retrieval_ms(records: list[dict], method: str) -> list[float]:
    keys = RETRIEVAL_STAGES[method]
    out = []
    for r in records:
        ms = r.get("ms", {})
        present = [ms[k] for k in keys if k in ms]
        if not present and ms:  # a method that names its stages differently: everything but planning/encoding
            present = [v for k, v in ms.items() if k not in ("plan", "encode", "gnn")]
        out.append(float(sum(present)))
    return out


@dataclasses.dataclass
class Row:
    name: str
    method: str  # stem | safe | scr
    config: StemConfig
    options: dict[str, Any]
    cut: str  # the answer cut and where it was chosen
    training: str  # training data, steps, time


def scr_row(name: str, checkpoint: Path, base: StemConfig) -> Row:
    tag = "scr-rel" if json.loads((checkpoint / "scr.json").read_text())["spec"].get("relation_aware") else "scr"
    choice_path = RESULTS / f"{tag}-metaqa-dev-choice.json"
    scr = base.scr
    where = "ScrConfig default (no dev choice file)"
    if choice_path.is_file():
        choice = json.loads(choice_path.read_text())
        if choice.get("checkpoint") == str(checkpoint) and choice.get("split") == "dev":
            scr = dataclasses.replace(scr, min_hops=int(choice["min_hops"]), answer_cut=float(choice["answer_cut"]))
            where = f"dev validation ({choice_path.name})"
    summary_path = checkpoint / "train-summary.json"
    train = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    config = json.loads((checkpoint / "scr.json").read_text()).get("config", {})
    best = train.get("best") or {}
    training = (f"dev: {train.get('usable_train', '?')} train / {train.get('usable_val', '?')} validation questions "
                f"(hash split); {train.get('steps', '?')} steps x {config.get('train_batch')} questions, best "
                f"validation step {best.get('step', '?')}; {train.get('seconds', '?')} s")
    return Row(name, "scr", dataclasses.replace(base, scr=scr), {"checkpoint": checkpoint},
               f"min_hops={scr.min_hops}, answer_cut={scr.answer_cut} ({where})", training)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-hop", type=int, default=300, help="questions per hop (0: the full test split)")
    parser.add_argument("--rows", default="stem,safe,safe+phrases,scr,scr+rel")
    parser.add_argument("--scr-checkpoint", type=Path, default=None)
    parser.add_argument("--scr-rel-checkpoint", type=Path, default=None)
    parser.add_argument("--gnn-checkpoint", type=Path, default=None, help="also a STEM row with GNN guidance")
    parser.add_argument("--safe-injective", choices=["true", "false"], default=None,
                        help="SAFE's injective matching as decided on dev (default: SafeConfig's)")
    parser.add_argument("--runs", type=Path, default=Path("runs/compare"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    base = StemConfig()
    if args.safe_injective is not None:
        base = dataclasses.replace(base, safe=dataclasses.replace(base.safe, injective=args.safe_injective == "true"))
    engine = Engine.open("metaqa", config=base, planner=PlannerSpec("pattern"), split="test", log=print,
                         guidance=args.gnn_checkpoint)
    questions = subset(engine.dataset.questions, args.per_hop) if args.per_hop else list(engine.dataset.questions)
    planner_seconds = (engine.planner.report if hasattr(engine.planner, "report") else {}).get("seconds")
    safe_cut = (f"answer_margin={base.safe.answer_margin}, injective={base.safe.injective}, k_retrieval="
                f"{base.safe.k_retrieval} (SafeConfig defaults, chosen on MetaQA dev: "
                "experiments/results/safe-metaqa-dev-sample200.md)")
    rows: list[Row] = []
    for name in [r for r in args.rows.split(",") if r]:
        if name == "stem":
            rows.append(Row("STEM", "stem", base, {}, f"engine.answer_cut={base.engine.answer_cut} (StemConfig default)",
                            f"pattern planner {planner_seconds:.0f} s" if planner_seconds else "pattern planner"))
        elif name == "safe":
            rows.append(Row("SAFE, planner ids", "safe", base, {}, safe_cut, "none (pattern planner's pseudo graphs)"))
        elif name == "safe+phrases":
            config = dataclasses.replace(base, safe=dataclasses.replace(base.safe, relation_phrases=True))
            rows.append(Row("SAFE, phrases + ADJ", "safe", config, {}, safe_cut,
                            "none (pattern planner's templates rendered with relation phrases)"))
        elif name == "scr" and args.scr_checkpoint:
            rows.append(scr_row("SCR (faithful)", args.scr_checkpoint, base))
        elif name == "scr+rel" and args.scr_rel_checkpoint:
            rows.append(scr_row("scr+rel (relation-aware, not the paper)", args.scr_rel_checkpoint, base))
    if args.gnn_checkpoint:
        rows.insert(1, Row("STEM + GNN guidance", "stem", base, {"guidance": True},
                           f"engine.answer_cut={base.engine.answer_cut} (StemConfig default)", "pattern planner + GNN"))

    table_rows, results = [], {}
    for row in rows:
        began = time.perf_counter()
        out = args.runs / row.name.split(" (")[0].replace(" ", "-").replace(",", "").lower()
        if row.method == "stem" and not row.options.get("guidance"):
            context = engine.context("stem")
            context = dataclasses.replace(context, guidance=None)
        else:
            context = engine.context(row.method)
        context = dataclasses.replace(context, config=row.config,
                                      options={**context.options, **{k: v for k, v in row.options.items()
                                                                     if k != "guidance"}})
        method = build_method(row.method, context)
        wall_file = out / "compare-wall.json"  # a resumed row keeps the wall time of the run that did the work
        done_before = len(read_finished(out / "predictions.jsonl")) if (out / "predictions.jsonl").exists() else 0
        summary = evaluate_method(method, questions, out, chunk_size=row.config.engine.chunk_questions,
                                  show_progress=False, log=print)
        wall = time.perf_counter() - began
        if done_before >= len(questions) and wall_file.is_file():
            wall = json.loads(wall_file.read_text())["wall_seconds"]
        else:
            wall_file.write_text(json.dumps({"wall_seconds": wall, "questions": len(questions)}))
        records = list(read_finished(out / "predictions.jsonl").values())
        wanted = {q.qid for q in questions}
        records = [r for r in records if r["id"] in wanted]
        ms = retrieval_ms(records, row.method)
        results[row.name] = {"summary": summary, "wall_seconds": wall, "questions_per_second": len(questions) / wall,
                             "retrieval_ms_median": float(np.median(ms)), "retrieval_ms_p95": float(np.percentile(ms, 95)),
                             "cut": row.cut, "training": row.training, "fingerprint": method.fingerprint()}
        groups = summary["groups"]
        def cell(key: str, groups: dict = groups) -> str:
            return " / ".join(f"{100 * groups[g]['mean'][key]:.1f}" if key in groups[g]["mean"] else "-"
                              for g in sorted(groups))

        table_rows.append([row.name, " / ".join(str(groups[g]["n"]) for g in sorted(groups)), cell("hit"),
                           cell("hit_at_1"), cell("f1"), cell("coverage"),
                           f"{results[row.name]['retrieval_ms_median']:.1f} / {results[row.name]['retrieval_ms_p95']:.1f}",
                           f"{results[row.name]['questions_per_second']:.1f}", row.cut, row.training])
        print(markdown_table(["method", "n", "Hit", "Hit@1", "F1", "coverage", "ms p50 / p95", "q/s", "cut", "training"],
                             table_rows[-1:]))
    bound = gold_path_bound(questions, engine.index, engine.dataset.entity_names) or {"groups": {}}
    if bound["groups"]:
        groups = bound["groups"]
        table_rows.append(["gold-path bound (same questions)", " / ".join(str(groups[g]["n"]) for g in sorted(groups)),
                           " / ".join(f"{100 * groups[g]['mean']['hit']:.1f}" for g in sorted(groups)), "-",
                           " / ".join(f"{100 * groups[g]['mean']['f1']:.1f}" for g in sorted(groups)), "100", "-", "-",
                           "-", "-"])
    headers = ["method", "questions 1/2/3-hop", "Hit 1/2/3", "Hit@1 1/2/3", "F1 1/2/3", "coverage 1/2/3",
               "retrieval ms p50 / p95", "questions/s", "answer cut (where chosen)", "training"]
    table = markdown_table(headers, table_rows)
    meta = run_metadata()
    sample = (f"stratified subset ({args.per_hop} per hop, lowest sha256(qid))" if args.per_hop
              else "full test split")
    text = (f"Command: `python experiments/compare_methods.py --per-hop {args.per_hop}"
            + (f" --scr-checkpoint {args.scr_checkpoint}" if args.scr_checkpoint else "")
            + (f" --scr-rel-checkpoint {args.scr_rel_checkpoint}" if args.scr_rel_checkpoint else "")
            + (f" --safe-injective {args.safe_injective}" if args.safe_injective else "") + "`\n\n"
            f"MetaQA-partial test, {sample}, pattern planner, one engine, machine {meta['machine']} "
            f"({meta['cpu_count']} cores, shared with other jobs), commit {meta['commit']}. No setting was chosen on "
            "test: each row's answer cut says where it was chosen. Retrieval ms: STEM anchor+trace+answer (per-chunk "
            "averages), SAFE value retrieval + ADJ + matching, SCR beam search (per batch / batch size); planning "
            "and text encoding excluded. questions/s: whole evaluate call.\n\n"
            f"{table}\n")
    print(text)
    write_report(args.out, f"compare-methods-metaqa-{args.per_hop or 'full'}" + ("per-hop" if args.per_hop else ""),
                 {"meta": meta, "per_hop": args.per_hop, "results": results, "gold_path_bound": bound}, text)


if __name__ == "__main__":
    main()
