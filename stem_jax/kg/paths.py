"""Following a relation path through the KG index (the gold-path upper bound)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stem_jax.data.types import PathStep
from stem_jax.kg.index import KGIndex
from stem_jax.kg.subgraph import csr_gather


def follow_relation_path(index: KGIndex, topic: int, path: Sequence[PathStep]) -> tuple[np.ndarray, np.ndarray]:
    """Entities reached from ``topic`` along ``path`` and the triples used on the way.

    The topic is excluded from every intermediate and final set (MetaQA's convention). A relation
    missing from the KG reaches nothing. Returns (sorted entity ids, sorted triple ids).
    """
    frontier = np.asarray([topic], dtype=np.int64)
    used: list[np.ndarray] = []
    for step in path:
        relation = index.relation_ids.get(step.relation)
        if relation is None or frontier.size == 0:
            return np.zeros(0, np.int32), np.zeros(0, np.int32)
        candidates = np.unique(csr_gather(index.csr_offsets, index.csr_triples, frontier))
        rows = index.triples[candidates]
        source, target = (rows[:, 0], rows[:, 2]) if step.forward else (rows[:, 2], rows[:, 0])
        keep = (rows[:, 1] == relation) & np.isin(source, frontier)
        used.append(candidates[keep])
        reached = np.unique(target[keep])
        frontier = reached[reached != topic]
    triples = np.unique(np.concatenate(used)) if used else np.zeros(0, np.int64)
    return frontier.astype(np.int32), triples.astype(np.int32)
