"""Why a traced step's bindings did not come through the plan's relation.

The tracer matches a schema step by similarity: a KG triple of another relation can bind the step
when the plan's own relation has no edge there. That is the paper's soft matching, and what lets a
plan with an approximate relation still answer; but when the plan names a KG relation exactly (the
oracle's gold path, a grounded pattern plan) and none of the step's bindings used it, the answers
come from other relations, ranked by their similarity, and the run should say so instead of
presenting them as matches of the plan. :func:`unmatched_steps` names such steps and why the
relation matched nothing: no edge of it leaves the parent's bindings, or its only edges lead back to
a question entity the KG's convention excludes from answers (a self-loop on the topic).

The tracer's scores are left as they are (its kernel and the reference tracer agree on them); this
is read from the trace output afterwards, per run, in O(edges of the bound parents).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import numpy as np

from stem_jax.kg.index import KGIndex


def unmatched_steps(index: KGIndex, steps: np.ndarray, nodes: np.ndarray, via: np.ndarray,
                    excluded: Collection[int], display: Callable[[str], str] = str) -> list[str]:
    """One line per step of a traced run whose bound nodes all came through other relations than the step's.

    ``steps`` [S, 3] (parent slot, child slot, relation id; -1: not a KG relation, not checked), ``nodes``
    and ``via`` [slots, F] the run's bindings and the triples that bound them (-1 empty), ``excluded``
    the KG ids that are never answers (the topic, under the KG's exclude-topic convention)."""
    lines = []
    triples = index.triples
    for parent, child, relation in np.asarray(steps).reshape(-1, 3).tolist():
        if relation < 0 or child >= len(via):
            continue
        held = (nodes[child] >= 0) & (via[child] >= 0) & ~np.isin(nodes[child], list(excluded))
        bound = via[child][held]  # an excluded binding (the topic again) is no answer
        if not len(bound) or (triples[bound, 1] == relation).any():
            continue
        parents = np.unique(nodes[parent][nodes[parent] >= 0])
        ends = []
        for node in parents.tolist():
            incident = index.incident(node)
            own = incident[triples[incident, 1] == relation]
            ends += [int(t) for row in triples[own] for t in (row[0], row[2]) if t != node or row[0] == row[2]]
        others = sorted({index.relations[r] for r in triples[bound, 1].tolist()})
        name = index.relations[relation]
        where = ", ".join(display(index.entities[n]) for n in parents[:3].tolist()) or "the anchor"
        if ends and all(e in excluded for e in ends):
            why = f"its only edges from {where} lead back to {display(index.entities[ends[0]])}, a question entity " \
                  "never returned as an answer"
        else:
            why = f"no edge of it leaves {where}"
        lines.append(f"relation {name} matched nothing ({why}); the step was bound through "
                     f"{', '.join(others)} instead, by similarity")
    return lines
