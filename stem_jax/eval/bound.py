"""The gold-path upper bound: follow each question's gold relation path from its topic entity.

What a perfect planner and tracer could reach on this KG; reported next to every accuracy table.
Paths come from :func:`stem_jax.plan.oracle.gold_paths` (a stored gold path, else the MetaQA qtype,
else shortest paths in the question's own graph), so the bound covers every dataset the oracle covers.
"""

from __future__ import annotations

from collections.abc import Iterable

from stem_jax.data.types import Question
from stem_jax.eval.metrics import MetricAccumulator, strict_metrics
from stem_jax.kg.index import KGIndex
from stem_jax.kg.paths import follow_relation_path
from stem_jax.plan.oracle import gold_paths


def gold_path_bound(questions: Iterable[Question], index: KGIndex, names: dict[str, str] | None = None) -> dict | None:
    """Per-hop Hit, F1 and exact-set share of the entities the first gold path reaches (None: no paths)."""
    names = names or {}
    acc = MetricAccumulator(group_name="hops")
    found = False
    for q in questions:
        paths = gold_paths(q).paths
        if not paths or paths[0][0] not in index.entity_ids:
            continue
        topic, path = paths[0]
        reached, _ = follow_relation_path(index, index.entity_ids[topic], path)
        predicted = [names.get(index.entities[e], index.entities[e]) for e in reached]
        gold = [names.get(a, a) for a in q.answers]
        metrics = strict_metrics(predicted, gold)
        acc.add({"hit": metrics["hit"], "f1": metrics["f1"], "exact_set": float(set(predicted) == set(gold))},
                group=f"{q.hops}-hop")
        found = True
    return acc.summary() if found else None
