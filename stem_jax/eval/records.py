"""The one record builder: a method's :class:`~stem_jax.methods.base.Retrieval` -> a ``predictions.jsonl`` record.

Shared by every method, so their rows are scored by the same code: display names for answers and
evidence, coverage of the gold-path evidence (eq. 17), per-stage milliseconds. Method-specific
extras (STEM's plans, strategies and θ; SAFE's matches) come from ``retrieval.info``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.eval.metrics import coverage_rate
from stem_jax.methods.base import MethodContext, Retrieval
from stem_jax.plan.oracle import gold_path_triple_ids, gold_path_triples

MAX_EVIDENCE_LISTED = 256


def make_record(context: MethodContext, question: Question, retrieval: Retrieval, method: str) -> dict[str, Any]:
    """The JSON record of one question (RoG's evaluator reads ``prediction`` and ``ground_truth``)."""
    return make_records(context, [question], [retrieval], method)[0]


def make_records(context: MethodContext, questions: Sequence[Question], retrievals: Sequence[Retrieval],
                 method: str) -> list[dict[str, Any]]:
    """The JSON records of a batch of questions, each exactly as :func:`make_record` writes it.

    The gold-path evidence ``R`` of the whole batch is walked at once (:func:`gold_path_triple_ids`,
    the questions grouped by relation path) and coverage compared by triple id, where ids and
    (head, relation, tail) strings correspond one to one; a question whose ``R`` lies in its own
    graph (RoG) is compared by strings, as before. The listed evidence triples of the batch are read
    in one gather, and each entity they or the answers name is displayed once."""
    index = context.index
    golds = gold_path_triple_ids(questions, index)
    evidence = [sorted(set(retrieval.evidence)) for retrieval in retrievals]
    listed = [ids[:MAX_EVIDENCE_LISTED] for ids in evidence]
    bounds = np.cumsum([0, *map(len, listed)]).tolist()
    rows = index.triples[np.asarray([t for ids in listed for t in ids], dtype=np.int64)]
    answers = np.asarray([e for retrieval in retrievals for e, _ in retrieval.answers], dtype=np.int64)
    display, entities = context.display, index.entities
    named, at = np.unique(np.concatenate([rows[:, 0], rows[:, 2], answers]), return_inverse=True)
    names = np.asarray([display(entities[e]) for e in named.tolist()], dtype=object)
    shown = dict(zip(named.tolist(), names.tolist(), strict=True))
    n = len(rows)  # [h, r, t] of every listed triple, made in one pass for the batch
    relations = np.asarray(index.relations, dtype=object)
    triples = list(map(list, zip(names[at[:n]].tolist(), relations[rows[:, 1]].tolist(), names[at[n : 2 * n]].tolist(),
                                 strict=True)))
    return [_record(context, question, retrieval, method, gold, ids, triples[bounds[i] : bounds[i + 1]], shown)
            for i, (question, retrieval, gold, ids) in enumerate(zip(questions, retrievals, golds, evidence,
                                                                       strict=True))]


def _record(context: MethodContext, question: Question, retrieval: Retrieval, method: str,
            gold_ids: np.ndarray | None, evidence_ids: list[int], listed: list[list[str]],
            shown: dict[int, str]) -> dict[str, Any]:
    index = context.index
    if gold_ids is None:  # R is in the question's own graph: compare (head, relation, tail) strings
        gold = gold_path_triples(question, index)
        coverage = coverage_rate(gold, index.triple_strings(evidence_ids), undirected=False) if gold else None
        gold_count = len(gold)
    else:
        gold_count = len(gold_ids)
        found = set(evidence_ids)
        coverage = sum(t in found for t in gold_ids.tolist()) / gold_count if gold_count else None
    record = {
        "id": question.qid,
        "question": question.text,
        "hops": question.hops,
        "prediction": [shown[e] for e, _ in retrieval.answers],
        "scores": [round(float(s), 6) for _, s in retrieval.answers],
        "ground_truth": [context.display(a) for a in question.answers],
        "evidence": listed,
        "evidence_count": len(evidence_ids),
        "coverage": coverage,
        "gold_path_triples": gold_count,
        "overflow": int(retrieval.overflow),
        "ms": {k: round(v, 3) for k, v in retrieval.stage_ms.items()},
        **retrieval.info,
    }
    if retrieval.chains:
        record["chains"] = list(retrieval.chains)
    record["method"] = method
    bad = [s for s in record.get("scores", []) if not math.isfinite(s)]
    if bad:
        raise StemError(f"{method} produced a non-finite answer score for question {question.qid} ({bad[0]})\n"
                        "  how to fix: check the configuration for NaN/inf values (stem-jax config)")
    return record
