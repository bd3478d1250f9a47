"""How much of the gold evidence the guidance graph holds: recall per hop for a range of K'."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from stem_jax.data.types import Question
from stem_jax.gnn.data import gold_entities
from stem_jax.gnn.guidance import guidance_size
from stem_jax.kg.index import KGIndex
from stem_jax.plan.schema import SchemaGraph


def recall_by_hop(pairs: Sequence[tuple[Question, SchemaGraph]], top_ids: np.ndarray, index: KGIndex,
                  k_primes: Sequence[int], *, inside: Sequence[np.ndarray] | None = None) -> dict[str, Any]:
    """Per hop and K': mean recall of gold-evidence entities in the top |T|·K' (``top_ids`` rows are
    best first, -1 padded), and the same normalised by what K entities can hold,
    ``hits / min(K, |gold|)``. Questions without gold evidence are counted and left out.
    ``inside`` (optional, per pair: the subgraph's entity ids) adds the subgraph's own recall,
    the ceiling for any K."""
    groups: dict[str, dict[str, Any]] = {}
    for row, (question, schema) in enumerate(pairs):
        key = f"{question.hops}-hop" if question.hops is not None else "all"
        g = groups.setdefault(key, {"questions": 0, "no_gold": 0, "gold_sizes": [], "ceiling": [],
                                    "recall": {k: [] for k in k_primes}, "normalised": {k: [] for k in k_primes}})
        g["questions"] += 1
        gold = gold_entities(question, index)
        if gold.size == 0:
            g["no_gold"] += 1
            continue
        g["gold_sizes"].append(len(gold))
        ranked = top_ids[row]
        if inside is not None:
            g["ceiling"].append(float(np.isin(gold, inside[row]).mean()))
        for k_prime in k_primes:
            k = guidance_size(len(schema.triples), k_prime)
            hits = int(np.isin(gold, ranked[:k][ranked[:k] >= 0]).sum())
            g["recall"][k_prime].append(hits / len(gold))
            g["normalised"][k_prime].append(hits / min(k, len(gold)))
    out: dict[str, Any] = {}
    for key in sorted(groups):
        g = groups[key]
        out[key] = {
            "questions": g["questions"], "without_gold_evidence": g["no_gold"],
            "gold_entities_mean": float(np.mean(g["gold_sizes"])) if g["gold_sizes"] else None,
            "gold_entities_median": float(np.median(g["gold_sizes"])) if g["gold_sizes"] else None,
            "subgraph_recall": float(np.mean(g["ceiling"])) if g["ceiling"] else None,
            "recall": {str(k): float(np.mean(v)) for k, v in g["recall"].items() if v},
            "recall_normalised": {str(k): float(np.mean(v)) for k, v in g["normalised"].items() if v},
        }
    return out
