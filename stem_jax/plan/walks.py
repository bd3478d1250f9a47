"""Phase 1 of the paper's Structure-to-Query reverse generation (appendix C.2).

A random walk over the KG from a random start entity gives a small reasoning-path subgraph; its
start stays a constant (the question entity) and every later node is masked as a placeholder
``[ENT1]``, ``[ENT2]``, ... (the last one is the answer), which makes a schema graph of exactly
the kind a planner produces. The Triple-GNN trains on the walk's entities as labels (eq. 42); the
vLLM export (:func:`stem_jax.plan.synthetic.sample_masked_walks`) hands the masked triples to an LLM
to write a question (Phase 2).

Walks are undirected, never revisit a node or reuse a triple, and only pass *through* nodes of
degree <= ``hub_cap`` (a capped hub is not expanded by the k-hop subgraph, so a walk through it
would leave the subgraph); the last node may be a hub. Everything is a pure function of the
generator, so a training step's samples depend only on (seed, step).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from stem_jax.kg.index import KGIndex
from stem_jax.plan.schema import SchemaGraph, SchemaTriple


@dataclasses.dataclass(frozen=True)
class Walk:
    start: int
    entities: tuple[int, ...]  # start first, then each newly reached node
    triples: tuple[int, ...]  # KG triple id of each step
    schema: SchemaGraph


def random_walk(index: KGIndex, rng: np.random.Generator, *, max_hops: int = 3, hub_cap: int = 2000,
                names: dict[str, str] | None = None, attempts: int = 16) -> Walk | None:
    """A walk of 1..``max_hops`` steps as a masked schema graph, or None if ``attempts`` all failed."""
    names = names or {}
    degree = index.degree
    for _ in range(attempts):
        start = int(rng.integers(index.num_entities))
        if degree[start] == 0:
            continue
        length = int(rng.integers(1, max_hops + 1))
        nodes, used = [start], []
        for step in range(length):
            node = nodes[-1]
            if step > 0 and degree[node] > hub_cap:
                break
            incident = index.incident(node)
            rows = index.triples[incident]
            other = np.where(rows[:, 0] == node, rows[:, 2], rows[:, 0])
            ok = ~np.isin(other, nodes) & ~np.isin(incident, used)
            if not ok.any():
                break
            pick = int(rng.choice(np.flatnonzero(ok)))
            used.append(int(incident[pick]))
            nodes.append(int(other[pick]))
        if len(used) < 1:
            continue
        label = {start: names.get(index.entities[start], index.entities[start])}
        label.update({n: f"[ENT{i}]" for i, n in enumerate(nodes[1:], start=1)})
        triples = tuple(
            SchemaTriple(label[int(h)], index.relations[int(r)], label[int(t)])
            for h, r, t in index.triples[np.asarray(used)]
        )
        schema = SchemaGraph(triples=triples, answer=label[nodes[-1]], strategy="Precision")
        return Walk(start=start, entities=tuple(nodes), triples=tuple(used), schema=schema)
    return None
