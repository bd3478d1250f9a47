"""Gold-path upper bounds: follow each question's gold relation path(s) from its topic entity.

What a perfect planner and tracer could reach on this KG; reported next to every accuracy table,
in two labelled forms (both from :func:`stem_jax.kg.paths.walk_relation_path`):

* **the data's own bound** (:func:`data_bound`): the gold path walked as written (directed, any
  triple at any step), the topic kept unless the dataset says its answers never include it
  (``Dataset.excludes_topic``: MetaQA, whose bound is the walk it always reported);
* **the bound under the engine's conventions** (:func:`engine_bound`): the same path walked the way
  the engine traces (undirected or directed matching, its used-triple rule, topic exclusion).

A question with several topic entities (``Question.constraints``) reaches the entities every
constraint's walk reaches. Paths come from :func:`stem_jax.plan.oracle.gold_paths` (a stored gold
path, else the MetaQA qtype, else shortest paths in the question's own graph).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from stem_jax.data.types import Question
from stem_jax.eval.metrics import MetricAccumulator, strict_metrics
from stem_jax.kg.index import KGIndex
from stem_jax.kg.paths import walk_relation_path
from stem_jax.plan.oracle import gold_paths


def gold_path_bound(questions: Iterable[Question], index: KGIndex, names: dict[str, str] | None = None, *,
                    directed: bool = True, used: str = "step", drop_topic: str = "every") -> dict | None:
    """Per-hop Hit, F1 and exact-set share of the entities the gold path(s) reach (None: no paths).

    A question without gold answers is not scored: it is counted in ``skipped`` ("no gold answers").

    The defaults are MetaQA's walk (directed, topic dropped from every set); :func:`data_bound` and
    :func:`engine_bound` choose the conventions. Single-path questions follow their first gold path."""
    names = names or {}
    acc = MetricAccumulator(group_name="hops")
    found = False
    for q in questions:
        found_paths = gold_paths(q)
        paths = found_paths.paths if found_paths.source == "constraints" else found_paths.paths[:1]
        if not paths or any(topic not in index.entity_ids for topic, _ in paths):
            continue
        reached = None
        for topic, path in paths:
            ids, _ = walk_relation_path(index, index.entity_ids[topic], path, directed=directed, used=used,
                                        drop_topic=drop_topic)
            reached = ids if reached is None else np.intersect1d(reached, ids)
        predicted = [names.get(index.entities[e], index.entities[e]) for e in reached]
        gold = [names.get(a, a) for a in q.answers]
        try:
            metrics = strict_metrics(predicted, gold)
        except ValueError:  # no gold answers (none given, or none left after normalising): a counted skip
            acc.skip("no gold answers", group=f"{q.hops}-hop")
            found = True
            continue
        acc.add({"hit": metrics["hit"], "f1": metrics["f1"], "exact_set": float(set(predicted) == set(gold))},
                group=f"{q.hops}-hop")
        found = True
    return acc.summary() if found else None


def data_bound(questions: Iterable[Question], index: KGIndex, names: dict[str, str] | None = None, *,
               excludes_topic: bool = False) -> dict | None:
    """The data's own bound: gold paths walked as written; ``excludes_topic`` (the dataset's own
    convention, ``Dataset.excludes_topic``) drops the topic from every set as MetaQA's data does."""
    return gold_path_bound(questions, index, names, directed=True, used="step",
                           drop_topic="every" if excludes_topic else "never")


def engine_bound(questions: Iterable[Question], index: KGIndex, names: dict[str, str] | None = None, *,
                 direction: str = "undirected", used_triples: str = "run", exclude_topic: bool = True) -> dict | None:
    """The bound under the engine's conventions: ``direction`` (undirected | directed matching),
    ``used_triples`` (run | branch | step) and ``exclude_topic`` (answers without the topic)."""
    return gold_path_bound(questions, index, names, directed=direction == "directed", used=used_triples,
                           drop_topic="final" if exclude_topic else "never")


def bounds(dataset, index: KGIndex, conventions: dict | None = None) -> dict:
    """Both bounds of ``dataset``'s questions, labelled: ``{"data": ..., "engine": ..., "conventions": ...}``.

    ``conventions``: the engine's ``direction``, ``used_triples`` and ``exclude_topic`` (default:
    today's engine defaults: undirected, once per run, topic excluded)."""
    conventions = dict(conventions or {"direction": "undirected", "used_triples": "run", "exclude_topic": True})
    questions = list(dataset.questions)
    return {
        "data": data_bound(questions, index, dataset.entity_names, excludes_topic=dataset.excludes_topic),
        "engine": engine_bound(questions, index, dataset.entity_names, **conventions),
        "conventions": conventions,
    }
