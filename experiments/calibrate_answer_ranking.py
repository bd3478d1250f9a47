"""Calibrate the answer ranking's beam gap and support cut on MetaQA dev (issue 8): trace once, re-rank many times.

Every dev question is planned, anchored and traced once with the default engine; each chunk's runs are folded
into a :class:`~stem_jax.answer.rank.ChunkAnswers` by :func:`stem_jax.methods.stem.rank.fold`, what the rank stage ranks, and every
(``engine.beam_gap``, ``engine.answer_cut``) point of the grid is scored from those, per hop (Hit@1, Hit, F1).
The tracer does not depend on either value, so one trace serves the whole grid.

Command (from the repo root; needs `stem-jax index --dataset metaqa` and `stem-jax train-planner --dataset metaqa`):

    STEM_DATA_DIR=../shared/data STEM_CACHE_DIR=... python experiments/calibrate_answer_ranking.py [--limit N]

Writes experiments/results/answer-ranking-calibration-metaqa-dev.{json,md}.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

from stem_jax import Engine
from stem_jax.answer.rank import ChunkAnswers
from stem_jax.eval.metrics import strict_metrics
from stem_jax.eval.report import markdown_table, run_metadata, write_report
from stem_jax.methods.stem.anchor import anchor
from stem_jax.methods.stem.rank import fold, ranking_gap
from stem_jax.methods.stem.trace import trace
from stem_jax.methods.stem.types import split_by_question

GAPS = (math.inf, 1.0, 0.75, 0.5, 0.35, 0.25, 0.1)
CUTS = (0.5, 0.3, 0.7)


Folded = tuple[ChunkAnswers, list[tuple[int, int]], list[tuple[int, list[str], float]]]


def collect(limit: int | None, chunk: int, gnn: Path | None) -> tuple[list[Folded], dict, object, object]:
    """Per traced chunk: its folded answers, the (question, entity) pairs never returned, and per question
    (hops, gold answers, the widening the engine adds to ``engine.beam_gap`` for its runs)."""
    engine = Engine.open("metaqa", planner="pattern", split="dev", limit=limit, log=print, guidance=gnn)
    method = engine.method("stem")
    res = method.resources
    rules = res.rank_rules()
    folded: list[Folded] = []
    questions = [q for q in engine.dataset.questions if q.answers]
    began = time.perf_counter()
    for start in range(0, len(questions), chunk):
        part = questions[start : start + chunk]
        method.prepare(part)
        runs = [run for q in part for run in method.runs[q.qid]]
        outputs = trace(res, anchor(res, runs, [method.hyper])).outputs[0]  # what eval traces
        per_question = [method.runs[question.qid] for question in part]
        answers, exclude, _ = fold(res.index, rules, part, per_question, split_by_question(outputs, per_question))
        # the widening the engine adds to engine.beam_gap for these runs (τ when they are guided)
        about = [(q.hops, list(q.answers), ranking_gap(rules, mine, method.hyper) - rules.beam_gap)
                 for q, mine in zip(part, per_question, strict=True)]
        folded.append((answers, exclude, about))
        print(f"\r traced {min(start + chunk, len(questions))}/{len(questions)} questions "
              f"[{time.perf_counter() - began:.0f}s]", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    info = {"questions": len(questions), "trace_seconds": round(time.perf_counter() - began, 1),
            "theta": float(method.hyper.theta)}

    def display(entity: int) -> str:
        return res.display(res.index.entities[entity])

    return folded, info, display, res.mediators  # mediators: walked through, never returned


def score(folded, display, never, gap: float, cut: float) -> dict[str, dict[str, float]]:
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for answers, exclude, about in folded:
        chunk = answers.ranked("beam", cut, [gap + widen for _, _, widen in about], exclude, never=never)
        for (hops, gold, _), pairs in zip(about, chunk, strict=True):
            metrics = strict_metrics([display(e) for e, _ in pairs], gold)
            for group in (f"{hops}-hop", "all"):
                sums[group]["n"] += 1
                for k in ("hit_at_1", "hit", "f1"):
                    sums[group][k] += metrics[k]
    return {g: {k: (round(100 * v / s["n"], 2) if k != "n" else int(v)) for k, v in s.items()} for g, s in sums.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="first N dev questions per hop")
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--out", type=Path, default=Path("experiments/results"))
    parser.add_argument("--gnn-checkpoint", type=Path, help="trace with Triple-GNN guidance from this train-gnn run")
    args = parser.parse_args(argv)
    folded, info, display, never = collect(args.limit, args.chunk, args.gnn_checkpoint)
    info["guidance"] = str(args.gnn_checkpoint) if args.gnn_checkpoint else "none"
    rows, points = [], []
    for gap in GAPS:
        for cut in CUTS:
            result = score(folded, display, never, gap, cut)
            points.append({"beam_gap": gap if math.isfinite(gap) else "inf", "answer_cut": cut, "metrics": result})
            for group in sorted(result):
                m = result[group]
                rows.append([gap, cut, group, m["n"], m["hit_at_1"], m["hit"], m["f1"]])
    best = max(points, key=lambda p: (p["metrics"]["all"]["hit_at_1"] + p["metrics"]["all"]["f1"]))
    meta = run_metadata()
    table = markdown_table(["beam_gap", "answer_cut", "hops", "questions", "Hit@1", "Hit", "F1"], rows)
    flags = (f" --limit {args.limit}" if args.limit else "") + (
        f" --gnn-checkpoint {args.gnn_checkpoint}" if args.gnn_checkpoint else "")
    text = (f"Command: `python experiments/calibrate_answer_ranking.py{flags}`"
            f" (MetaQA dev, pattern planner, default engine, guidance: {info['guidance']}; traced once in"
            f" {info['trace_seconds']} s, re-ranked per point; a guided run's gap is beam_gap + τ, see"
            " stem_jax.methods.stem.rank.ranking_gap)."
            f"\n\nMachine: {meta}\n\n{table}\n\nBest by all-hop Hit@1 + F1: beam_gap={best['beam_gap']}, "
            f"answer_cut={best['answer_cut']}: {best['metrics']['all']}\n")
    name = "answer-ranking-calibration-metaqa-dev" + ("-gnn" if args.gnn_checkpoint else "") + (
        f"-limit{args.limit}" if args.limit else "")
    write_report(args.out, name, {"meta": meta, **info, "points": points,
                                                                      "best": best}, text)
    print(text)


if __name__ == "__main__":
    main()
