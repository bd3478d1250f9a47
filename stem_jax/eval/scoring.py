"""Scoring a run folder's ``predictions.jsonl``: metrics per hop from the file alone.

Every method's metrics come from this file (never from memory), so a resumed run scores exactly
like an uninterrupted one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stem_jax.eval.metrics import MetricAccumulator, SplitScorer
from stem_jax.eval.run_folder import clean_predictions

# The metrics group of questions whose hop count is unknown (no gold path): named apart from "all", which is
# every question of the split in reports.
UNKNOWN_HOPS = "hops unknown"


def read_finished(path: Path) -> dict[str, dict]:
    """Records already written; a torn last line (killed mid-write) or a corrupt line anywhere is reported
    with its line number, cut out and redone (:func:`stem_jax.eval.run_folder.clean_predictions`)."""
    return clean_predictions(path)


SCORED_FIELDS = ("id", "hops", "prediction", "ground_truth", "coverage", "overflow")


def scored_fields(record: dict) -> dict:
    """The part of a record :func:`score_records` reads (a run keeps these, not whole records, in memory)."""
    fields = {k: record[k] for k in SCORED_FIELDS if k in record}
    if record.get("scores"):
        # what confidence reads: the best answer's beam support (STEM's own score unless an answer scorer ranked)
        fields["top_score"] = record.get("support", record["scores"][0])
    return fields


def answered_precision(records: Iterable[dict], thresholds: Iterable[float]) -> list[dict[str, float]]:
    """Per threshold t: the share of scored questions whose best answer's score is at least t (answered), and
    Hit@1 among those (answered precision). Questions without gold answers are left out, as in the metrics."""
    scorer = SplitScorer()
    rows = []
    for record in records:
        if record.get("ground_truth"):
            hit1 = scorer.strict_metrics(record["prediction"], record["ground_truth"])["hit_at_1"]
            top = record.get("top_score", record["scores"][0] if record.get("scores") else 0.0)
            rows.append((float(top) if record["prediction"] else -1.0, float(hit1)))
    out = []
    for t in thresholds:
        answered = [hit for top, hit in rows if top >= t]
        out.append({"threshold": float(t), "answered": len(answered) / max(len(rows), 1),
                    "precision": sum(answered) / len(answered) if answered else float("nan"), "n": len(rows)})
    return out


def score_predictions(path: Path, qids: set[str] | None = None) -> dict[str, Any]:
    """Metrics per hop from predictions.jsonl alone, so a resumed run scores like a fresh one."""
    return score_records(read_finished(path).values(), qids)


def score_records(records: Iterable[dict], qids: set[str] | None = None) -> dict[str, Any]:
    """Metrics per hop of ``records`` in the order given (the file's order: float sums are order-sensitive).

    :func:`score_predictions` reads them from predictions.jsonl; an eval that wrote every record itself
    passes the very records it wrote (the same values: JSON gives back each string, int and float exactly),
    so the report is the same byte for byte without parsing the file again."""
    acc = MetricAccumulator(group_name="hops")
    scorer = SplitScorer()
    overflow = defaultdict(int)
    for record in records:
        if qids is not None and record["id"] not in qids:
            continue
        group = f"{record['hops']}-hop" if record.get("hops") is not None else UNKNOWN_HOPS
        if not record["ground_truth"]:
            acc.skip("no gold answers", group=group)
            continue
        metrics = scorer.strict_metrics(record["prediction"], record["ground_truth"])
        rog = scorer.rog_question_metrics(record["prediction"], record["ground_truth"])
        metrics["rog_hit"] = rog["rog_hit"]
        metrics["rog_f1"] = rog["rog_f1"]
        if record.get("coverage") is not None:
            metrics["coverage"] = record["coverage"]
        metrics["overflow_questions"] = float(record["overflow"] > 0)
        acc.add(metrics, group=group)
        overflow[group] += record["overflow"]
    summary = acc.summary()
    summary["overflow_total"] = dict(overflow)
    return summary


EVERY_QUESTION_METRICS = ("hit", "hit_at_1", "f1", "precision", "recall", "rog_hit", "rog_f1")


def over_every_question(summary: dict[str, Any], dropped: Iterable[tuple[str, str, Any]]) -> dict[str, Any]:
    """The headline metrics over every question of the split, overall and per hop group: the scored ones plus
    those the loader could not make answerable (``dropped``: (qid, reason, hops), e.g. no topic entity found),
    each a miss; the dropped questions are listed by reason, so no question leaves the denominator unnoticed."""
    by_reason: dict[str, list[str]] = defaultdict(list)
    by_group: dict[str, int] = defaultdict(int)
    for qid, reason, hops in dropped:
        by_reason[reason].append(qid)
        by_group[f"{hops}-hop" if hops is not None else UNKNOWN_HOPS] += 1

    def widened(stats: dict[str, Any], extra: int) -> dict[str, Any]:
        scored = int(stats["n"])
        total = scored + extra
        return {"n": total, "scored": scored, "mean": {k: stats["mean"][k] * scored / total
                                                       for k in EVERY_QUESTION_METRICS if k in stats["mean"]}}

    empty = {"n": 0, "mean": {}}
    groups = {g: widened(summary.get("groups", {}).get(g, empty), by_group.get(g, 0))
              for g in dict.fromkeys([*summary.get("groups", {}), *by_group])}
    return {**widened(summary["overall"], sum(by_group.values())), "groups": groups,
            "dropped": {r: len(v) for r, v in sorted(by_reason.items())},
            "dropped_ids": {r: v for r, v in sorted(by_reason.items())}}
