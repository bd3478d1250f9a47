"""Schema graphs: the planner's output and the tracer's input.

A schema graph is a small set of triples over constants (question entities, other named
entities) and placeholders ``[ENT1]``, ``[ENT2]``, ...; one placeholder is the answer, and a
strategy says how the tracer selects KG triples (``Precision``: best triple per step;
``Breadth``: every triple scoring at least θ). Tracing starts from an anchor constant and walks
the schema edges in depth-first order (paper Algorithm 1, ``MATCH``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from typing import Any, Literal

import numpy as np

from stem_jax.errors import StemError
from stem_jax.kg.index import KGIndex, relation_text

Strategy = Literal["Precision", "Breadth"]
STRATEGIES: tuple[Strategy, ...] = ("Precision", "Breadth")
_PLACEHOLDER = re.compile(r"^\[ENT\d+\]$")


def is_placeholder(node: str) -> bool:
    return node.startswith("[ENT") and bool(_PLACEHOLDER.match(node))


@dataclasses.dataclass(frozen=True)
class SchemaTriple:
    head: str
    relation: str
    tail: str

    def text(self) -> str:
        """What the encoder sees: ``Kismet directed by [ENT1]``."""
        return f"{self.head} {relation_text(self.relation)} {self.tail}"


@dataclasses.dataclass(frozen=True)
class TraceStep:
    """One schema edge in DFS order: bind ``child`` from the KG nodes already bound to ``parent``."""

    edge: int  # index into SchemaGraph.triples
    parent: str
    child: str


@dataclasses.dataclass(frozen=True)
class SchemaGraph:
    """Immutable, so its node names are listed once, when it is made (planning and tracing a split asked for them
    four times a question); they stay out of equality, hashing and pickles."""

    triples: tuple[SchemaTriple, ...]
    answer: str
    strategy: Strategy = "Precision"

    def __post_init__(self) -> None:
        if not self.triples:
            raise StemError("a schema graph needs at least one triple")
        if self.strategy not in STRATEGIES:
            raise StemError(f"unknown strategy {self.strategy!r}; use Precision or Breadth")
        number: dict[str, int] = {}
        ends = []
        for t in self.triples:
            ends.append((number.setdefault(t.head, len(number)), number.setdefault(t.tail, len(number))))
        node_names = tuple(number)
        object.__setattr__(self, "_node_names", node_names)
        # the shape (which triples share which nodes) decides the tracing order; many plans share one
        object.__setattr__(self, "_ends", tuple(ends))
        object.__setattr__(self, "_constants", tuple(n for n in node_names if not is_placeholder(n)))
        if self.answer not in node_names:
            raise StemError(f"answer node {self.answer!r} is not in the schema graph {self.describe()}")

    def __getstate__(self) -> dict[str, Any]:
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    def nodes(self) -> list[str]:
        return list(self._node_names)

    def constants(self) -> list[str]:
        return list(self._constants)

    def incident(self, node: str) -> list[int]:
        """Schema edges touching ``node``, in triple order (Algorithm 1's GET_N on G_sch)."""
        return [i for i, t in enumerate(self.triples) if node in (t.head, t.tail)]

    def dfs_order(self, anchor: str) -> list[TraceStep]:
        """Schema edges in the order Algorithm 1 visits them from ``anchor``.

        MATCH(e) takes e's incident edges in order, skipping the edge it arrived by, and recurses
        into each edge's other end before the next edge. Edges unreachable from the anchor are
        never traced; a cycle back to a visited node is not followed (trees are the norm).
        """
        if anchor not in self._node_names:
            raise StemError(f"anchor {anchor!r} is not a node of {self.describe()}")
        names = self._node_names
        return [TraceStep(edge, names[parent], names[child])
                for edge, parent, child in _dfs_shape(self._ends, names.index(anchor))]

    def describe(self) -> str:
        body = "; ".join(f"({t.head}, {t.relation}, {t.tail})" for t in self.triples)
        return f"{{{body}}} -> {self.answer} [{self.strategy}]"


@functools.lru_cache(maxsize=4096)
def _dfs_shape(ends: tuple[tuple[int, int], ...], anchor: int) -> tuple[tuple[int, int, int], ...]:
    """:meth:`SchemaGraph.dfs_order` over node numbers: ``ends[i]`` is triple i's (head, tail); returns
    (edge, parent, child) per step. The plans of one template share a shape, so each shape is walked once."""
    incident: dict[int, list[int]] = {}  # GET_N of every node, in triple order
    for i, (head, tail) in enumerate(ends):
        incident.setdefault(head, []).append(i)
        if tail != head:
            incident.setdefault(tail, []).append(i)
    steps: list[tuple[int, int, int]] = []
    seen_edges: set[int] = set()
    seen_nodes = {anchor}

    def visit(node: int) -> None:
        for edge in incident.get(node, ()):
            if edge in seen_edges:
                continue
            head, tail = ends[edge]
            child = tail if head == node else head
            seen_edges.add(edge)
            if child in seen_nodes:
                continue
            seen_nodes.add(child)
            steps.append((edge, node, child))
            visit(child)

    visit(anchor)
    return tuple(steps)


def match_anchor(schema: SchemaGraph, entity_name: str) -> str | None:
    """The schema constant that names ``entity_name`` (exact, else fuzzy ratio >= 0.6), or None."""
    constants = schema.constants()
    if entity_name in constants:
        return entity_name
    lowered = {c.lower(): c for c in constants}
    if entity_name.lower() in lowered:
        return lowered[entity_name.lower()]
    close = difflib.get_close_matches(entity_name.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None


def anchor_closeness(constant: str, entity_name: str) -> float:
    """How closely a schema constant names an entity: 2 exact, 1.5 up to case, else difflib's ratio (<= 1).

    :func:`match_anchor` accepts fuzzy names, so two topic entities with similar names ("Billy Ray
    Cyrus", "Miley Cyrus") can both match one constant; the closer one is the entity the plan means.
    """
    if constant == entity_name:
        return 2.0
    if constant.lower() == entity_name.lower():
        return 1.5
    return difflib.SequenceMatcher(None, entity_name.lower(), constant.lower()).ratio()


@dataclasses.dataclass(frozen=True)
class GroundedPlan:
    """A schema graph traced from one anchor, as int arrays the tracer consumes.

    ``steps`` [S, 3] holds (parent slot, child slot, relation id) per DFS step, where slot 0 is
    the anchor and slot ``s + 1`` is the child bound by step ``s``; ``-1`` marks a relation
    absent from the KG. ``answer_slot`` is the slot of the answer node, or -1 when the
    answer is unreachable from the anchor.

    ``forward`` [S] says each step's orientation: True when the parent node is the schema triple's
    head (the step walks the relation head -> tail), False when it is the tail; a direction-aware
    tracer (``engine.direction=directed``) matches KG triples of that orientation only.
    ``constants`` lists (slot, KG entity id) of the question entities other than the anchor that the
    schema names (a conjunctive question's second topic): a binding of such a slot counts only when
    it is that entity (:func:`stem_jax.trace.types.prune_unreached`); the id is -1 for constants that
    are not question entities known to the KG, and such a slot is not checked.
    """

    schema: SchemaGraph
    anchor: str
    steps: np.ndarray
    step_edges: tuple[int, ...]
    answer_slot: int
    forward: tuple[bool, ...] | None = None
    constants: tuple[tuple[int, int], ...] = ()

    @property
    def num_steps(self) -> int:
        return int(self.steps.shape[0])

    def orientation(self) -> np.ndarray:
        """bool [S]: True where step ``s`` walks its relation head -> tail (all True when unknown)."""
        if self.forward is None:
            return np.ones(self.num_steps, bool)
        return np.asarray(self.forward, bool).reshape(self.num_steps)

    def step_texts(self) -> list[str]:
        return [self.schema.triples[e].text() for e in self.step_edges]


def ground(schema: SchemaGraph, anchor: str, index: KGIndex, entity_of: dict[str, int] | None = None) -> GroundedPlan:
    """``schema`` traced from ``anchor``: DFS steps, their orientation and the constants to check.

    ``entity_of`` maps schema constants to KG ids: the question's other topic entities, by the name
    the schema uses. Another constant that is exactly a KG entity (an entity the question mentions, which a
    constraint branch ends at) is checked as that entity; the rest (a value a planner wrote) are listed with -1:
    not checked."""
    order = schema.dfs_order(anchor)
    slot = {anchor: 0}
    rows = []
    forward = []
    for s, step in enumerate(order):
        slot[step.child] = s + 1
        triple = schema.triples[step.edge]
        rows.append((slot[step.parent], s + 1, index.relation_ids.get(triple.relation, -1)))
        forward.append(triple.head == step.parent)
    steps = np.asarray(rows, dtype=np.int32).reshape(-1, 3)
    entity_of = entity_of or {}
    constants = tuple(
        (slot[node], int(entity_of.get(node, index.entity_ids.get(node, -1))))
        for node in schema.constants() if node != anchor and node in slot
    )
    return GroundedPlan(
        schema=schema, anchor=anchor, steps=steps, step_edges=tuple(s.edge for s in order),
        answer_slot=slot.get(schema.answer, -1), forward=tuple(forward), constants=constants,
    )

