"""Reading a chain schema graph back as the relation path it walks (the inverse of ``schema_from_path``)."""

from __future__ import annotations

from stem_jax.data.types import PathStep
from stem_jax.plan.schema import SchemaGraph, is_placeholder


def chain_path(schema: SchemaGraph) -> tuple[PathStep, ...] | None:
    """The relation path of a chain ``topic - [ENT1] - ... - answer`` from its one constant, or None when the
    schema is not such a chain (a tree with several constants, a branch off the path to the answer)."""
    constants = [n for n in schema.nodes() if not is_placeholder(n)]
    if len(constants) != 1:
        return None
    steps, node, used = [], constants[0], set()
    while node != schema.answer:
        edges = [(i, t) for i, t in enumerate(schema.triples) if i not in used and node in (t.head, t.tail)]
        if len(edges) != 1:
            return None
        i, triple = edges[0]
        used.add(i)
        forward = triple.head == node
        steps.append(PathStep(triple.relation, forward))
        node = triple.tail if forward else triple.head
    return tuple(steps) if len(used) == len(schema.triples) else None
