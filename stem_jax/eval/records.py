"""The one record builder: a method's :class:`~stem_jax.methods.base.Retrieval` -> a ``predictions.jsonl`` record.

Shared by every method, so their rows are scored by the same code: display names for answers and
evidence, coverage of the gold-path evidence (eq. 17), per-stage milliseconds. Method-specific
extras (STEM's plans, strategies and θ; SAFE's matches) come from ``retrieval.info``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np

from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.eval.metrics import coverage_rate
from stem_jax.kg.index import KGIndex
from stem_jax.plan.oracle import gold_path_triple_keys, gold_path_triples

if TYPE_CHECKING:  # annotations only: methods build on eval, never the other way at run time
    from stem_jax.methods.base import MethodContext, Retrieval

MAX_EVIDENCE_LISTED = 256
# score types whose float64 array holds exactly float(score), so they can be rounded as one array
_FLOAT_EXACT = frozenset({float, int, np.float64, np.float32})


def make_record(context: MethodContext, question: Question, retrieval: Retrieval, method: str) -> dict[str, Any]:
    """The JSON record of one question (RoG's evaluator reads ``prediction`` and ``ground_truth``)."""
    return make_records(context, [question], [retrieval], method)[0]


def make_records(context: MethodContext, questions: Sequence[Question], retrievals: Sequence[Retrieval],
                 method: str) -> list[dict[str, Any]]:
    """The JSON records of a batch of questions, each exactly as :func:`make_record` writes it.

    The gold-path evidence ``R`` of the whole batch is walked at once (:func:`gold_path_triple_keys`,
    the questions grouped by relation path) and coverage compared by triple id, where ids and
    (head, relation, tail) strings correspond one to one; a question whose ``R`` lies in its own
    graph (RoG) is compared by strings, as before. The listed evidence triples of the batch are read
    in one gather, each entity they or the answers name is displayed once, and each distinct score
    and stage time rounded once."""
    index = context.index
    evidence = [sorted(set(retrieval.evidence)) for retrieval in retrievals]
    gold_counts, covered, own_graph = _gold_coverage(questions, index, evidence)
    listed = [ids[:MAX_EVIDENCE_LISTED] for ids in evidence]
    bounds = np.cumsum([0, *map(len, listed)]).tolist()
    rows = index.triples[np.asarray([t for ids in listed for t in ids], dtype=np.int64)]
    answer_bounds = np.cumsum([0, *(len(retrieval.answers) for retrieval in retrievals)]).tolist()
    answers = np.asarray([e for retrieval in retrievals for e, _ in retrieval.answers], dtype=np.int64)
    display, entities = context.display, index.entities
    named, at = np.unique(np.concatenate([rows[:, 0], rows[:, 2], answers]), return_inverse=True)
    names = np.asarray([display(entities[e]) for e in named.tolist()], dtype=object)
    n = len(rows)  # [h, r, t] of every listed triple, made in one pass for the batch
    relations = np.asarray(index.relations, dtype=object)
    triples = list(map(list, zip(names[at[:n]].tolist(), relations[rows[:, 1]].tolist(), names[at[n : 2 * n]].tolist(),
                                 strict=True)))
    predictions = names[at[2 * n :]].tolist()
    scores, finite = _rounded_scores([s for retrieval in retrievals for _, s in retrieval.answers])
    stage_ms = _rounded_stage_ms(retrievals)
    # answers repeat across a batch: each displayed once
    shown_answers = {a: display(a) for a in dict.fromkeys(chain.from_iterable(q.answers for q in questions))}
    records = []
    for i, (question, retrieval, ids) in enumerate(zip(questions, retrievals, evidence, strict=True)):
        if own_graph[i]:  # R is in the question's own graph: compare (head, relation, tail) strings
            gold = gold_path_triples(question, index)
            coverage = coverage_rate(gold, index.triple_strings(ids), undirected=False) if gold else None
            gold_count = len(gold)
        else:
            gold_count = gold_counts[i]
            coverage = covered[i] / gold_count if gold_count else None
        record = {
            "id": question.qid,
            "question": question.text,
            "hops": question.hops,
            "prediction": predictions[answer_bounds[i] : answer_bounds[i + 1]],
            "scores": scores[answer_bounds[i] : answer_bounds[i + 1]],
            "ground_truth": list(map(shown_answers.__getitem__, question.answers)),
            "evidence": triples[bounds[i] : bounds[i + 1]],
            "evidence_count": len(ids),
            "coverage": coverage,
            "gold_path_triples": gold_count,
            "overflow": int(retrieval.overflow),
            "ms": stage_ms[i],
            **retrieval.info,
        }
        if retrieval.chains:
            record["chains"] = list(retrieval.chains)
        record["method"] = method
        if not finite or "scores" in retrieval.info:
            bad = [s for s in record.get("scores", []) if not math.isfinite(s)]
            if bad:
                raise StemError(f"{method} produced a non-finite answer score for question {question.qid} ({bad[0]})\n"
                                "  how to fix: check the configuration for NaN/inf values (stem-jax config)")
        records.append(record)
    return records


def _gold_coverage(questions: Sequence[Question], index: KGIndex,
                   evidence: Sequence[list[int]]) -> tuple[list[int], list[int], list[bool]]:
    """Per question: how many triples ``R`` has, how many of them the (sorted, distinct) ``evidence`` holds, and
    whether ``R`` lies in the question's own graph instead (then both counts are 0: compare strings)."""
    keys, own_graph = gold_path_triple_keys(questions, index)
    n_triples = max(index.num_triples, 1)
    owner = keys // n_triples
    sizes = list(map(len, evidence))
    ids = np.fromiter(chain.from_iterable(evidence), dtype=np.int64, count=sum(sizes))
    valid = (ids >= 0) & (ids < n_triples)  # only these can be gold triples; keys stay sorted without the rest
    evidence_keys = (np.repeat(np.arange(len(evidence), dtype=np.int64), sizes) * n_triples + ids)[valid]
    at = np.minimum(np.searchsorted(evidence_keys, keys), max(evidence_keys.size - 1, 0))
    found = evidence_keys[at] == keys if evidence_keys.size else np.zeros(keys.shape, bool)
    gold_counts = np.bincount(owner, minlength=len(questions)).tolist()
    covered = np.bincount(owner[found], minlength=len(questions)).tolist()
    return gold_counts, covered, own_graph


def _rounded_scores(scores: list[Any]) -> tuple[list[float], bool]:
    """``[round(float(s), 6) for s in scores]`` (each distinct value rounded once: Python's correctly rounded
    ``round`` is what costs, and a batch's scores repeat), and whether all are finite."""
    if not set(map(type, scores)) <= _FLOAT_EXACT:
        rounded = [round(float(s), 6) for s in scores]
        return rounded, all(map(math.isfinite, rounded))
    values = np.asarray(scores, dtype=np.float64)
    return _round_distinct(values, 6), bool(np.isfinite(values).all())


def _rounded_stage_ms(retrievals: Sequence[Retrieval]) -> list[dict[str, float]]:
    """Each retrieval's ``{stage: round(ms, 3)}``; a chunk's questions share their stage times."""
    values = [v for retrieval in retrievals for v in retrieval.stage_ms.values()]
    if not set(map(type, values)) <= {float}:  # round() of an int stays an int
        return [{k: round(v, 3) for k, v in retrieval.stage_ms.items()} for retrieval in retrievals]
    rounded = iter(_round_distinct(np.asarray(values, dtype=np.float64), 3))  # every retrieval's values in turn
    return [dict(zip(retrieval.stage_ms, rounded, strict=False)) for retrieval in retrievals]


def _round_distinct(values: np.ndarray, digits: int) -> list[float]:
    """``[round(v, digits) for v in values.tolist()]``, rounding each distinct bit pattern once (-0.0 keeps its sign)."""
    distinct, at = np.unique(values.view(np.int64), return_inverse=True)
    rounded = np.asarray([round(v, digits) for v in distinct.view(np.float64).tolist()], dtype=np.float64)
    return rounded[at].tolist()

