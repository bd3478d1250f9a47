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
is read from the trace output afterwards. :func:`runs_with_unmatched_steps` finds the runs that have such a
step for a whole chunk in a few array passes; :func:`unmatched_steps` then explains each of those (in
O(edges of the bound parents)), so a chunk where every plan's relation matched costs no per-run Python.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

from stem_jax.kg.index import KGIndex
from stem_jax.ragged import pad_ragged


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


def runs_with_unmatched_steps(index: KGIndex, steps: Sequence[np.ndarray], nodes: Sequence[np.ndarray],
                              via: Sequence[np.ndarray], excluded: Sequence[Collection[int]]) -> np.ndarray:
    """Per run, whether :func:`unmatched_steps` names any step of it (bool [runs]), for many runs at once.

    Runs are grouped by their bindings' shape and each group is checked in array passes over its steps: a
    step is unmatched when it names a KG relation, some of its bindings are held (bound through a triple, not
    an excluded entity) and no held binding came through that relation."""
    flags = np.zeros(len(steps), bool)
    if not len(steps):
        return flags
    relation_of = index.triples[:, 1]
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, n in enumerate(nodes):
        groups.setdefault(np.shape(n), []).append(i)
    for shape, members in groups.items():
        slots = shape[0]
        rows = np.arange(len(members))
        n = np.stack([nodes[i] for i in members])  # [R, slots, F]
        v = np.stack([via[i] for i in members])
        # plans [R, width, 3] and excluded ids [R, >= 1], -1 padded
        plan, _ = pad_ragged([np.asarray(steps[i]).reshape(-1, 3) for i in members], -1, np.int64, tail=(3,))
        width = plan.shape[1]
        banned_rows = [sorted(excluded[i]) for i in members]
        banned, _ = pad_ragged(banned_rows, -1, np.int64, width=max(max(map(len, banned_rows), default=0), 1))
        for s in range(width):
            child, relation = plan[:, s, 1], plan[:, s, 2]
            checked = (relation >= 0) & (child >= 0) & (child < slots)
            at = np.clip(child, 0, slots - 1)
            bound_nodes, bound_via = n[rows, at], v[rows, at]  # [R, F]
            held = (bound_nodes >= 0) & (bound_via >= 0)
            held &= ~(bound_nodes[:, :, None] == np.where(banned >= 0, banned, -2)[:, None, :]).any(-1)
            through = held & (relation_of[np.maximum(bound_via, 0)] == relation[:, None])
            flags[members] |= checked & held.any(1) & ~through.any(1)
    return flags
