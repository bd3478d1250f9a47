"""The relation paths that really leave an entity in the KG: the candidate plans of the path planner.

For a topic entity, every path of up to ``max_hops`` steps that exists in the KG is listed with the
entities it ends at, in both orientations (a step ``r`` walks head -> tail, ``^r`` tail -> head). A
mediator node (:mod:`stem_jax.kg.mediators`, Freebase's CVTs) is walked *through*: a path that ends
only at mediators is not a candidate, its two-step continuations are (a CVT hop is one step of two
relations).

Fan-out is bounded twice, so a hub cannot blow up the enumeration:

* a one-step path reaching more than ``fan_cap`` entities is continued from its first ``fan_cap``
  entities only (by entity id, so the bound is deterministic); its own end set stays complete;
* an intermediate entity with more than ``hub_cap`` incident triples is not expanded (a path passes
  through a hub such as a country only by one of the hub's own few relations, which the hub's side
  of a one-step path already lists).

Enumeration per topic is cached (:class:`PathCatalog`), so a topic asked about twice costs one walk.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from stem_jax.data.types import PathStep
from stem_jax.kg.index import KGIndex

RelationPath = tuple[PathStep, ...]


@dataclasses.dataclass(frozen=True)
class CandidatePath:
    """One relation path from a topic and the entities it ends at (mediators and the topic left out)."""

    path: RelationPath
    ends: np.ndarray  # int32 entity ids, sorted, distinct

    @property
    def hops(self) -> int:
        return len(self.path)


def path_key(path: Sequence[PathStep]) -> str:
    """``film.film.directed_by`` forward, ``^people.person.spouse_s`` backward, joined by `` / ``."""
    return " / ".join(("" if s.forward else "^") + s.relation for s in path)


def _steps_from(index: KGIndex, nodes: np.ndarray, hub_cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source node, step code, target) of every triple at ``nodes``; step code = 2·relation + forward.

    Nodes with more than ``hub_cap`` incident triples are skipped (see the module docstring).
    """
    offsets, incident, triples = index.csr_offsets, index.csr_triples, index.triples
    sources, codes, targets = [], [], []
    for node in nodes.tolist():
        lo, hi = int(offsets[node]), int(offsets[node + 1])
        if hi - lo > hub_cap:
            continue
        rows = triples[incident[lo:hi]]
        heads, rels, tails = rows[:, 0], rows[:, 1].astype(np.int64), rows[:, 2]
        out = heads == node
        back = tails == node  # a self-loop is both
        sources.append(np.full(int(out.sum() + back.sum()), node, np.int64))
        codes.append(np.concatenate([rels[out] * 2 + 1, rels[back] * 2]))
        targets.append(np.concatenate([tails[out], heads[back]]).astype(np.int64))
    if not sources:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    return np.concatenate(sources), np.concatenate(codes), np.concatenate(targets)


def enumerate_paths(index: KGIndex, topic: int, *, max_hops: int = 2, fan_cap: int = 64, hub_cap: int = 2000,
                    mediators: np.ndarray | None = None, max_paths: int = 4096) -> list[CandidatePath]:
    """The candidate paths of ``topic`` (see the module docstring), one-step paths first, then by key.

    ``max_paths`` caps the list (the first ones in that order); ``mediators`` is a bool mask over entities.
    """
    is_mediator = mediators if mediators is not None else np.zeros(index.num_entities, bool)
    found: list[CandidatePath] = []
    frontier: list[tuple[RelationPath, np.ndarray]] = [((), np.asarray([topic], np.int64))]
    for _ in range(max_hops):
        grown: list[tuple[RelationPath, np.ndarray]] = []
        for prefix, nodes in frontier:
            expand = nodes[:fan_cap] if prefix else nodes
            _, codes, targets = _steps_from(index, expand, hub_cap if prefix else max(hub_cap, len(index.triples)))
            keep = targets != topic
            codes, targets = codes[keep], targets[keep]
            if not len(codes):
                continue
            order = np.lexsort((targets, codes))
            codes, targets = codes[order], targets[order]
            starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
            for begin, end in zip(starts.tolist(), [*starts[1:].tolist(), len(codes)], strict=True):
                code = int(codes[begin])
                step = PathStep(index.relations[code // 2], bool(code % 2))
                ends = np.unique(targets[begin:end])
                path = (*prefix, step)
                grown.append((path, ends))
                answers = ends[~is_mediator[ends]]
                if len(answers):
                    found.append(CandidatePath(path, answers.astype(np.int32)))
        frontier = grown
        if len(found) >= max_paths:
            break
    found.sort(key=lambda c: (c.hops, path_key(c.path)))
    return found[:max_paths]


class PathCatalog:
    """Per-topic candidate paths, enumerated once and reused (the planner asks per question)."""

    def __init__(self, index: KGIndex, *, max_hops: int = 2, fan_cap: int = 64, hub_cap: int = 2000,
                 mediators: np.ndarray | None = None, max_paths: int = 4096) -> None:
        self.index = index
        self.options = dict(max_hops=max_hops, fan_cap=fan_cap, hub_cap=hub_cap, max_paths=max_paths)
        self.mediators = mediators
        self._cache: dict[int, list[CandidatePath]] = {}

    def paths(self, topic: int) -> list[CandidatePath]:
        if topic not in self._cache:
            self._cache[topic] = enumerate_paths(self.index, topic, mediators=self.mediators, **self.options)
        return self._cache[topic]
