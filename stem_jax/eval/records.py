"""The one record builder: a method's :class:`~stem_jax.methods.base.Retrieval` -> a ``predictions.jsonl`` record.

Shared by every method, so their rows are scored by the same code: display names for answers and
evidence, coverage of the gold-path evidence (eq. 17), per-stage milliseconds. Method-specific
extras (STEM's plans, strategies and θ; SAFE's matches) come from ``retrieval.info``.
"""

from __future__ import annotations

import math
from typing import Any

from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.eval.metrics import coverage_rate
from stem_jax.methods.base import MethodContext, Retrieval
from stem_jax.plan.oracle import gold_path_triples

MAX_EVIDENCE_LISTED = 256


def make_record(context: MethodContext, question: Question, retrieval: Retrieval, method: str) -> dict[str, Any]:
    """The JSON record of one question (RoG's evaluator reads ``prediction`` and ``ground_truth``)."""
    index = context.index
    evidence = index.triple_strings(sorted(set(retrieval.evidence)))
    gold = gold_path_triples(question, index)
    record = {
        "id": question.qid,
        "question": question.text,
        "hops": question.hops,
        "prediction": [context.display(index.entities[e]) for e, _ in retrieval.answers],
        "scores": [round(float(s), 6) for _, s in retrieval.answers],
        "ground_truth": [context.display(a) for a in question.answers],
        "evidence": [[context.display(h), r, context.display(t)] for h, r, t in evidence[:MAX_EVIDENCE_LISTED]],
        "evidence_count": len(evidence),
        "coverage": coverage_rate(gold, evidence, undirected=False) if gold else None,
        "gold_path_triples": len(gold),
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
