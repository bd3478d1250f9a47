"""Following a relation path through the KG index (the gold-path upper bounds).

One walk, under explicit conventions, so the data's own bound and the bound under the engine's
conventions are the same code with different switches:

* ``directed``: a step ``r`` (forward) goes head -> tail only, ``^r`` tail -> head only; undirected,
  any ``r`` triple at a frontier entity is walked to its other end (the paper's matching).
* ``used``: ``"step"`` lets every step use any triple; ``"run"`` (Algorithm 2's CONTRADICT, per run)
  bars triples an earlier step used anywhere in the walk; ``"branch"`` bars only the triples on the
  walk's own branch (walked exactly, entity by entity).
* ``drop_topic``: ``"never"``; ``"every"`` removes the topic from every intermediate and final set
  (MetaQA's convention: its paths never pass through the question's entity); ``"final"`` removes it
  from the answers only (what ``engine.exclude_topic`` does).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stem_jax.data.types import PathStep
from stem_jax.kg.index import KGIndex

USED_RULES = ("run", "branch", "step")
DROP_TOPIC = ("never", "every", "final")
_EMPTY = np.zeros(0, np.int32)


def step_edges(index: KGIndex, frontier: np.ndarray, relation: int, forward: bool, directed: bool,
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(triple ids, sources, targets) of the step's walkable triples at ``frontier`` (unique entity ids): the
    relation's triples that leave it at the step's own end and, undirected, at the other end too (a self-loop
    once). Each side reads only that relation's triples (:class:`~stem_jax.kg.index.RelationAdjacency`), not
    every triple incident to the frontier."""
    adjacency = index.relation_adjacency
    ids, sources = adjacency.step(frontier, relation, forward)
    targets = index.triples[ids, 2 if forward else 0]
    if directed:
        return ids, sources, targets
    back, back_sources = adjacency.step(frontier, relation, not forward)
    ends = index.triples[back]
    other = ends[:, 0] != ends[:, 2]  # a self-loop is already in
    back_targets = ends[:, 0 if forward else 2]
    return (np.concatenate([ids, back[other]]), np.concatenate([sources, back_sources[other]]),
            np.concatenate([targets, back_targets[other]]))


def walk_relation_path(index: KGIndex, topic: int, path: Sequence[PathStep], *, directed: bool = True,
                       used: str = "step", drop_topic: str = "never") -> tuple[np.ndarray, np.ndarray]:
    """Entities reached from ``topic`` along ``path`` under the given conventions (module docstring),
    and the triples walked on the way. A relation missing from the KG reaches nothing.
    Returns (sorted entity ids, sorted triple ids)."""
    if used not in USED_RULES:
        raise ValueError(f"unknown used-triple rule {used!r}; use one of {', '.join(USED_RULES)}")
    if drop_topic not in DROP_TOPIC:
        raise ValueError(f"unknown topic rule {drop_topic!r}; use one of {', '.join(DROP_TOPIC)}")
    if used == "branch":
        return _walk_branches(index, topic, path, directed, drop_topic)
    frontier = np.asarray([topic], dtype=np.int64)
    walked: list[np.ndarray] = []
    barred = np.zeros(0, np.int64)
    for step in path:
        relation = index.relation_ids.get(step.relation)
        if relation is None or frontier.size == 0:
            return _EMPTY, _EMPTY
        ids, _, targets = step_edges(index, frontier, relation, step.forward, directed)
        if used == "run":
            fresh = ~np.isin(ids, barred)
            ids, targets = ids[fresh], targets[fresh]
            barred = np.union1d(barred, ids)
        walked.append(ids)
        frontier = np.unique(targets)
        if drop_topic == "every":
            frontier = frontier[frontier != topic]
    if drop_topic == "final":
        frontier = frontier[frontier != topic]
    triples = np.unique(np.concatenate(walked)) if walked else np.zeros(0, np.int64)
    return frontier.astype(np.int32), triples.astype(np.int32)


def _walk_branches(index: KGIndex, topic: int, path: Sequence[PathStep], directed: bool, drop_topic: str,
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The ``"branch"`` rule, walked exactly: states are (entity, triples on its branch)."""
    states: set[tuple[int, frozenset[int]]] = {(topic, frozenset())}
    walked: set[int] = set()
    for step in path:
        relation = index.relation_ids.get(step.relation)
        if relation is None or not states:
            return _EMPTY, _EMPTY
        nxt: set[tuple[int, frozenset[int]]] = set()
        for node, on_branch in states:
            ids, _, targets = step_edges(index, np.asarray([node], np.int64), relation, step.forward, directed)
            for t, target in zip(ids.tolist(), targets.tolist(), strict=True):
                if t in on_branch or (drop_topic == "every" and target == topic):
                    continue
                nxt.add((target, on_branch | {t}))
                walked.add(t)
        states = nxt
    reached = {node for node, _ in states}
    if drop_topic == "final":
        reached.discard(topic)
    return np.asarray(sorted(reached), np.int32), np.asarray(sorted(walked), np.int32)


def follow_relation_path(index: KGIndex, topic: int, path: Sequence[PathStep]) -> tuple[np.ndarray, np.ndarray]:
    """MetaQA's walk: directed, the topic excluded from every intermediate and final set.
    Returns (sorted entity ids, sorted triple ids)."""
    return walk_relation_path(index, topic, path, directed=True, used="step", drop_topic="every")
