"""Ties between a KG entity and the other entities a question names: the conditions a candidate answer meets.

A question with several conditions ("what movie featuring Logan Lerman had Candice White as a crew member") names
more entities than the one its main relation path leaves from. The right answer is tied to each of them in the KG,
directly (``Fury -film.starring-> ...``) or through one mediator node, a Freebase CVT that joins the parts of one
fact (``Fury -film.other_crew-> m.0x -crew_member-> Candice White``). :func:`tied_nodes` lists every node tied to an
entity that way, with the relation at the entity's side of the tie; :class:`TieTable` keeps them per entity, so
that a split's questions read each named entity's ties once.
"""

from __future__ import annotations

import numpy as np

from stem_jax.kg.index import KGIndex

MEDIATOR_DEGREE = 64  # a mediator with more triples than this is a hub, not the join of one fact


def tied_nodes(index: KGIndex, entity: int, mediators: np.ndarray, *, mediator_degree: int = MEDIATOR_DEGREE
               ) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, relations): every node tied to ``entity`` directly or through one mediator (``mediators`` bool [n],
    degree at most ``mediator_degree``), each with the relation of the tie's triple at ``entity``'s side; a node
    tied several ways appears once per (node, relation). Sorted by node then relation; ``entity`` itself is left
    out."""
    triples = np.asarray(index.triples)
    rows = triples[index.incident(entity)]
    ends = np.where(rows[:, 0] == entity, rows[:, 2], rows[:, 0])
    first = rows[:, 1]
    degree = np.diff(np.asarray(index.csr_offsets))
    through = mediators[ends] & (degree[ends] <= mediator_degree) & (ends != entity)
    hops, hop_relation = ends[through], first[through]
    offsets = np.asarray(index.csr_offsets)
    starts, counts = offsets[hops], degree[hops]
    total = int(counts.sum())
    if total:
        owner = np.repeat(np.arange(len(hops)), counts)
        position = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        second = triples[np.asarray(index.csr_triples)[starts[owner] + position]]
        far = np.where(second[:, 0] == hops[owner], second[:, 2], second[:, 0])
        nodes = np.concatenate([ends, far])
        relations = np.concatenate([first, hop_relation[owner]])
    else:
        nodes, relations = ends, first
    keep = nodes != entity
    pairs = np.unique(np.stack([nodes[keep], relations[keep]], axis=1).astype(np.int64), axis=0)
    return pairs[:, 0].reshape(-1), pairs[:, 1].reshape(-1)


def tied_nodes_reference(triples: list[tuple[int, int, int]], entity: int, mediators: set[int],
                         mediator_degree: int = MEDIATOR_DEGREE) -> set[tuple[int, int]]:
    """:func:`tied_nodes` written plainly over a triple list: the (node, relation) pairs, as a set."""
    def around(node: int) -> list[tuple[int, int]]:
        return [(t if h == node else h, r) for h, r, t in triples if node in (h, t)]

    found = set()
    for end, relation in around(entity):
        if end != entity:
            found.add((end, relation))
        if end in mediators and end != entity and len(around(end)) <= mediator_degree:
            found.update((far, relation) for far, _ in around(end) if far != entity)
    return found


class TieTable:
    """Each entity's ties (:func:`tied_nodes`), made on first use and kept."""

    def __init__(self, index: KGIndex, mediators: np.ndarray, *, mediator_degree: int = MEDIATOR_DEGREE) -> None:
        self.index = index
        self.mediators = np.asarray(mediators, bool)
        self.mediator_degree = mediator_degree
        self._ties: dict[int, dict[int, tuple[int, ...]]] = {}

    def of(self, entity: int) -> dict[int, tuple[int, ...]]:
        """node -> the relations at ``entity``'s side of its ties to ``entity``."""
        ties = self._ties.get(entity)
        if ties is None:
            nodes, relations = tied_nodes(self.index, entity, self.mediators, mediator_degree=self.mediator_degree)
            ties = {}
            for node, relation in zip(nodes.tolist(), relations.tolist(), strict=True):
                ties.setdefault(node, ())
                ties[node] += (relation,)
            self._ties[entity] = ties
        return ties
