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
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax import Engine, StemConfig
from stem_jax.data.sampling import qid_rank, sample_per_hop
from stem_jax.eval.bound import gold_path_bound
from stem_jax.eval.loop import evaluate_method
from stem_jax.eval.report import markdown_table, run_metadata, write_report
from stem_jax.eval.scoring import read_finished, score_predictions
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


def scr_row(name: str, checkpoint: Path, base: StemConfig, dataset: str = "metaqa") -> Row:
    spec = json.loads((checkpoint / "scr.json").read_text())["spec"]
    tag = ("scr-rel" if spec.get("relation_aware") else "scr") + (
        "-ft" if spec.get("question_encoder", "segments") == "minilm" else "")  # as experiments/scr_metaqa.py's run_tag
    choice_path = RESULTS / f"{tag}-{dataset}-dev-choice.json"
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
    report = checkpoint / "train-scr.json"
    split = (json.loads(report.read_text()).get("split") if report.is_file() else None) or "dev"
    encoder = (f"fine-tuned MiniLM question encoder (top {spec.get('finetune_layers')} layers, "
               f"{spec.get('context_tokens')} tokens); " if tag.endswith("-ft") else "")
    training = (encoder + f"{split}: {train.get('usable_train', '?')} train / {train.get('usable_val', '?')} validation questions "
                f"(hash split); {train.get('steps', '?')} steps x {config.get('train_batch')} questions, best "
                f"validation step {best.get('step', '?')}; {train.get('seconds', '?')} s")
    return Row(name, "scr", dataclasses.replace(base, scr=scr), {"checkpoint": checkpoint},
               f"min_hops={scr.min_hops}, answer_cut={scr.answer_cut} ({where})", training)


GROUPS = {"metaqa": None, "wc2014": ("WC-P1", "WC-P2", "WC-C")}  # None: per hop count
STAGES = (300, 1000, 2000, 4000, 8000, 0)  # --per-hop 0 runs these stratified subsets in turn (0: everything)


def group_of(dataset: str, question) -> str:
    return question.qtype if GROUPS.get(dataset) else f"{question.hops}-hop"


class RowTimeUpError(Exception):
    """--row-seconds elapsed for the current row."""


def _row_time_up(signum, frame) -> None:
    raise RowTimeUpError


ALL = 10**9  # finished_per_group: every question of every group


def finished_per_group(questions: list, finished: set[str], dataset: str) -> int:
    """The largest N such that the stratified subset of N questions per group is all in ``finished``."""
    ranked: dict[str, list] = {}
    for q in questions:
        ranked.setdefault(group_of(dataset, q), []).append(q)
    best = ALL
    for group in ranked.values():
        order = sorted(group, key=qid_rank)
        best = min(best, next((i for i, q in enumerate(order) if q.qid not in finished), ALL))
    return best if ranked else 0


def stratified(questions: list, per_group: int, dataset: str) -> list:
    """Per group, the ``per_group`` questions with the lowest sha256(qid) (0 or more than a group has: all)."""
    return sample_per_hop(questions, per_group or None, rule="lowest_hash", group=lambda q: group_of(dataset, q))


def group_metrics(predictions: Path, questions: list, dataset: str) -> dict[str, dict]:
    """{group: {"n", "mean"}} scored from predictions.jsonl (score_predictions, per group of question ids)."""
    groups: dict[str, set[str]] = {}
    for q in questions:
        groups.setdefault(group_of(dataset, q), set()).add(q.qid)
    order = GROUPS.get(dataset) or sorted(groups)
    if not GROUPS.get(dataset):  # groups are hop counts: one pass over the file scores them all
        summary = score_predictions(predictions, {q.qid for q in questions})["groups"]
        return {g: {"n": summary[g]["n"], "mean": summary[g]["mean"]} for g in order if g in summary}
    out = {}
    for g in order:
        if g in groups:
            overall = score_predictions(predictions, groups[g])["overall"]
            out[g] = {"n": overall["n"], "mean": overall["mean"]}
    return out


def relative_paths(payload: Any) -> Any:
    """``payload`` with the cache folder written as ``$STEM_CACHE_DIR`` and the checkout's own path dropped."""
    text = json.dumps(payload)
    cache = os.environ.get("STEM_CACHE_DIR")
    if cache:
        text = text.replace(str(Path(cache).resolve()), "$STEM_CACHE_DIR").replace(cache.rstrip(os.sep), "$STEM_CACHE_DIR")
    return json.loads(text.replace(str(Path.cwd().resolve()) + os.sep, ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=sorted(GROUPS), default="metaqa",
                        help="metaqa (groups: hops) or wc2014 (groups: WC-P1, WC-P2, WC-C)")
    parser.add_argument("--per-hop", type=int, default=300,
                        help="questions per group (0: the full test split, run as growing stratified subsets)")
    parser.add_argument("--row-seconds", type=float, default=None,
                        help="stop each row after this many seconds (its finished predictions are kept; rerunning resumes); "
                             "the row reports the largest stratified subset it finished")
    parser.add_argument("--score-only", action="store_true",
                        help="evaluate nothing: score each row's finished stratified subset from its run folder")
    parser.add_argument("--rows", default="stem,safe,safe+phrases,scr,scr+rel")
    parser.add_argument("--scr-checkpoint", type=Path, default=None)
    parser.add_argument("--scr-rel-checkpoint", type=Path, default=None)
    parser.add_argument("--scr-ft-checkpoint", type=Path, default=None,
                        help="row scr-ft: faithful SCR trained with --scr.question_encoder=minilm (fine-tuned MiniLM)")
    parser.add_argument("--gnn-checkpoint", type=Path, default=None, help="also a STEM row with GNN guidance")
    parser.add_argument("--safe-injective", choices=["true", "false"], default=None,
                        help="SAFE's injective matching as decided on dev (default: SafeConfig's)")
    parser.add_argument("--runs", type=Path, default=Path("runs/compare"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    base = StemConfig()
    if args.safe_injective is not None:
        base = dataclasses.replace(base, safe=dataclasses.replace(base.safe, injective=args.safe_injective == "true"))
    engine = Engine.open(args.dataset, config=base, planner=PlannerSpec("pattern"), split="test", log=print,
                         guidance=args.gnn_checkpoint)
    every = list(engine.dataset.questions)
    planner_seconds = (engine.planner.report if hasattr(engine.planner, "report") else {}).get("seconds")
    safe_source = ("MetaQA dev: experiments/results/safe-metaqa-dev-sample200.md" if args.dataset == "metaqa"
                   else "MetaQA dev (experiments/results/safe-metaqa-dev-sample200.md); nothing chosen on WorldCup2014")
    safe_cut = (f"answer_margin={base.safe.answer_margin}, injective={base.safe.injective}, k_retrieval="
                f"{base.safe.k_retrieval} (SafeConfig defaults, chosen on {safe_source})")
    stem_cut = (f"engine.answer_cut={base.engine.answer_cut} (StemConfig default); θ and conventions from the KG's "
                "shipped dev calibration")
    rows: list[Row] = []
    for name in [r for r in args.rows.split(",") if r]:
        if name == "stem":
            rows.append(Row("STEM", "stem", base, {}, stem_cut,
                            f"pattern planner {planner_seconds:.0f} s" if planner_seconds else "pattern planner"))
        elif name == "safe":
            rows.append(Row("SAFE, planner ids", "safe", base, {}, safe_cut, "none (pattern planner's pseudo graphs)"))
        elif name == "safe+phrases":
            config = dataclasses.replace(base, safe=dataclasses.replace(base.safe, relation_phrases=True))
            rows.append(Row("SAFE, phrases + ADJ", "safe", config, {}, safe_cut,
                            "none (pattern planner's templates rendered with relation phrases)"))
        elif name == "scr" and args.scr_checkpoint:
            rows.append(scr_row("SCR (faithful)", args.scr_checkpoint, base, args.dataset))
        elif name == "scr-ft" and args.scr_ft_checkpoint:
            rows.append(scr_row("SCR-ft (faithful, fine-tuned MiniLM question encoder)", args.scr_ft_checkpoint, base,
                                args.dataset))
        elif name == "scr+rel" and args.scr_rel_checkpoint:
            rows.append(scr_row("scr+rel (relation-aware, not the paper)", args.scr_rel_checkpoint, base, args.dataset))
    if args.gnn_checkpoint:
        rows.insert(1, Row("STEM + GNN guidance", "stem", base, {"guidance": True}, stem_cut, "pattern planner + GNN"))

    stages = [args.per_hop] if args.per_hop else list(STAGES)
    table_rows, results = [], {}
    for row in rows:
        out = args.runs / row.name.split(" (")[0].replace(" ", "-").replace(",", "").lower()
        wall_file = out / "compare-wall.json"  # every invocation's (seconds, questions it finished), summed
        segments = json.loads(wall_file.read_text()).get("segments", []) if wall_file.is_file() else []
        if not args.score_only:
            if row.method == "stem" and not row.options.get("guidance"):
                context = engine.context("stem")
                context = dataclasses.replace(context, guidance=None)
            else:
                context = engine.context(row.method)
            context = dataclasses.replace(context, config=row.config,
                                          options={**context.options, **{k: v for k, v in row.options.items()
                                                                         if k != "guidance"}})
            method = build_method(row.method, context)
            if args.row_seconds is not None:  # a hard limit: the alarm interrupts a stage between two writes
                signal.signal(signal.SIGALRM, _row_time_up)
                signal.alarm(max(1, int(args.row_seconds)))
            try:
                for n in stages:
                    wanted = stratified(every, n, args.dataset)
                    done_before = (len(read_finished(out / "predictions.jsonl"))
                                   if (out / "predictions.jsonl").exists() else 0)
                    began, load_before = time.perf_counter(), os.getloadavg()[0]
                    try:
                        evaluate_method(method, wanted, out, chunk_size=row.config.engine.chunk_questions,
                                        show_progress=False, log=print)
                    finally:  # also when the row's time is up: the questions it finished count, with their time
                        done_after = len(read_finished(out / "predictions.jsonl"))
                        if done_after > done_before:
                            segments.append({"seconds": time.perf_counter() - began,
                                             "questions": done_after - done_before, "per_group": n,
                                             "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)]})
                            wall_file.write_text(json.dumps({"segments": segments}))
            except RowTimeUpError:
                print(f"{row.name}: row time {args.row_seconds:g} s spent; scoring the largest stratified subset done")
            finally:
                signal.alarm(0)
            fingerprint = method.fingerprint()
        else:
            fingerprint = json.loads((out / "fingerprint.json").read_text())["fingerprint"] \
                if (out / "fingerprint.json").is_file() else None
        written = read_finished(out / "predictions.jsonl") if (out / "predictions.jsonl").exists() else {}
        finished = set(written)
        reached = finished_per_group(every, finished, args.dataset)
        if args.per_hop:
            reached = min(reached, args.per_hop)
        questions = stratified(every, 0 if reached >= ALL else reached, args.dataset)
        groups = group_metrics(out / "predictions.jsonl", questions, args.dataset)
        chosen = {q.qid for q in questions}
        records = [r for r in written.values() if r["id"] in chosen]
        del written
        ms = retrieval_ms(records, row.method) or [0.0]
        seconds = sum(s["seconds"] for s in segments)
        done = sum(s["questions"] for s in segments)
        qps = done / seconds if seconds else float("nan")
        loads = [x for seg in segments for x in seg.get("load_1min", [])]
        subset_label = "all" if reached >= ALL else f"{reached} per group (stratified)"
        results[row.name] = {"groups": groups, "questions": len(questions), "subset": subset_label,
                             "wall_seconds": seconds, "questions_timed": done, "questions_per_second": qps,
                             "load_1min_range": [min(loads), max(loads)] if loads else None, "segments": segments,
                             "retrieval_ms_median": float(np.median(ms)), "retrieval_ms_p95": float(np.percentile(ms, 95)),
                             "cut": row.cut, "training": row.training, "fingerprint": fingerprint}

        def cell(key: str, groups: dict = groups) -> str:
            return " / ".join(f"{100 * groups[g]['mean'][key]:.1f}" if key in groups[g]["mean"] else "-"
                              for g in groups)

        table_rows.append([row.name, " / ".join(str(groups[g]["n"]) for g in groups), cell("hit"),
                           cell("hit_at_1"), cell("f1"), cell("coverage"),
                           f"{results[row.name]['retrieval_ms_median']:.1f} / {results[row.name]['retrieval_ms_p95']:.1f}",
                           f"{qps:.1f}" + (f" (load {min(loads):.1f}-{max(loads):.1f})" if loads else ""), row.cut, row.training])
        print(markdown_table(["method", "n", "Hit", "Hit@1", "F1", "coverage", "ms p50 / p95", "q/s", "cut", "training"],
                             table_rows[-1:]))
    # the bound over the largest question set any row finished (each row's n says which it covers)
    largest = max((r["questions"] for r in results.values()), default=0)
    bound_questions = next((stratified(every, 0 if r["subset"] == "all" else int(r["subset"].split()[0]), args.dataset)
                            for r in results.values() if r["questions"] == largest), every)
    bound_groups: dict[str, dict] = {}
    for g in GROUPS.get(args.dataset) or sorted({group_of(args.dataset, q) for q in bound_questions}):
        qs = [q for q in bound_questions if group_of(args.dataset, q) == g]
        found = gold_path_bound(qs, engine.index, engine.dataset.entity_names) if qs else None
        if found:
            bound_groups[g] = found["overall"]
    if bound_groups:
        table_rows.append([f"gold-path bound ({len(bound_questions)} questions)",
                           " / ".join(str(bound_groups[g]["n"]) for g in bound_groups),
                           " / ".join(f"{100 * bound_groups[g]['mean']['hit']:.1f}" for g in bound_groups), "-",
                           " / ".join(f"{100 * bound_groups[g]['mean']['f1']:.1f}" for g in bound_groups), "100", "-",
                           "-", "-", "-"])
    names = " / ".join(GROUPS.get(args.dataset) or ("1", "2", "3"))
    suffix = "" if GROUPS.get(args.dataset) else "-hop"
    headers = ["method", f"questions {names}{suffix}", f"Hit {names}", f"Hit@1 {names}", f"F1 {names}",
               f"coverage {names}", "retrieval ms p50 / p95", "questions/s", "answer cut (where chosen)", "training"]
    table = markdown_table(headers, table_rows)
    meta = run_metadata()
    label = {"metaqa": "MetaQA-partial", "wc2014": "WorldCup2014 (WC-P1, WC-P2, WC-C)"}[args.dataset]
    sample = (f"stratified subset ({args.per_hop} per group, lowest sha256(qid))" if args.per_hop
              else "full test split, run as growing stratified subsets (per group, lowest sha256(qid) first); a row "
                   "that could not finish reports the largest stratified subset it did (its questions column)")
    command = (f"python experiments/compare_methods.py --dataset {args.dataset} --per-hop {args.per_hop}"
               + (f" --scr-checkpoint {args.scr_checkpoint}" if args.scr_checkpoint else "")
               + (f" --scr-rel-checkpoint {args.scr_rel_checkpoint}" if args.scr_rel_checkpoint else "")
               + (f" --scr-ft-checkpoint {args.scr_ft_checkpoint}" if args.scr_ft_checkpoint else "")
               + (f" --rows {args.rows}" if args.rows != parser.get_default("rows") else "")
               + (f" --safe-injective {args.safe_injective}" if args.safe_injective else "")
               + (f" --row-seconds {args.row_seconds:g}" if args.row_seconds is not None else "")
               + f" --runs {args.runs}")
    text = (f"Command: `{command}`\n\n"
            f"{label} test, {sample}, pattern planner, one engine, machine {meta['machine']} "
            f"({meta['cpu_count']} cores, shared with other jobs), commit {meta['commit']}. No setting was chosen on "
            "test: each row's answer cut says where it was chosen. Retrieval ms: STEM anchor+trace+answer (per-chunk "
            "averages), SAFE value retrieval + ADJ + matching, SCR beam search (per batch / batch size); planning "
            "and text encoding excluded. questions/s: evaluate calls' wall time (planning included) over the "
            "questions they finished, summed over resumed invocations.\n\n"
            f"{table}\n")
    print(text)
    name = (f"compare-methods-{args.dataset}-{args.per_hop}per-hop" if args.per_hop
            else f"compare-methods-{args.dataset}-test")
    results = relative_paths(results)
    write_report(args.out, name, {"meta": meta, "dataset": args.dataset, "per_hop": args.per_hop, "command": command,
                                  "results": results, "gold_path_bound": bound_groups}, text)


if __name__ == "__main__":
    main()
