"""Schema templates: a schema graph with its question entities replaced by slots ``{0}``, ``{1}``, ...

The pattern planner predicts templates from question wording; the LLM planner's few-shot pool
keys its examples by template so a prompt shows distinct patterns.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from typing import Any

from stem_jax.plan.schema import SchemaGraph, SchemaTriple, is_placeholder

SLOT = re.compile(r"^\{(\d+)\}$")


@dataclasses.dataclass(frozen=True)
class Template:
    """A schema graph with its question entities replaced by slots ``{0}``, ``{1}``, ...

    ``triples`` use ``{i}`` for question entity ``i`` and ``[ENTk]`` placeholders numbered by
    first appearance, so two questions with the same relation pattern share one template.
    """

    triples: tuple[tuple[str, str, str], ...]
    answer: str

    @property
    def key(self) -> str:
        body = "; ".join(f"({h}, {r}, {t})" for h, r, t in self.triples)
        return f"{body} -> {self.answer}"

    @functools.cached_property
    def slots(self) -> int:
        """How many question entities the template needs."""
        found = [n for h, _, t in self._filled[0] for n in (h, t) if isinstance(n, int)]
        return max(found) + 1 if found else 0

    @functools.cached_property
    def _filled(self) -> tuple[tuple[tuple[int | str, str, int | str], ...], int | str]:
        """The triples and answer with each slot node as its question-entity index (an int), parsed once."""
        def parse(node: str) -> int | str:
            m = SLOT.match(node)
            return int(m.group(1)) if m else node

        return tuple((parse(h), r, parse(t)) for h, r, t in self.triples), parse(self.answer)

    @property
    def relations(self) -> tuple[str, ...]:
        return tuple(r for _, r, _ in self.triples)

    def instantiate(self, topics: Sequence[str], strategy: str = "Precision") -> SchemaGraph | None:
        """The schema graph for a question whose entities are ``topics``; None if too few."""
        if len(topics) < self.slots:
            return None

        parsed, answer = self._filled
        triples = tuple(SchemaTriple(topics[h] if isinstance(h, int) else h, r, topics[t] if isinstance(t, int) else t)
                        for h, r, t in parsed)
        return SchemaGraph(triples=triples, answer=topics[answer] if isinstance(answer, int) else answer,
                           strategy=strategy)

    def to_json(self) -> dict[str, Any]:
        return {"triples": [list(t) for t in self.triples], "answer": self.answer}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Template:
        return cls(tuple(tuple(t) for t in data["triples"]), data["answer"])


def template_of(schema: SchemaGraph, topics: Sequence[str]) -> Template | None:
    """Abstract ``schema`` over the question entities ``topics``; None when it names other constants.

    Constants are matched to topics case-insensitively. A schema that mentions an entity the
    question does not (a constant that is neither a topic nor a placeholder) cannot be a
    reusable pattern, so it yields None and the caller counts it.
    """
    slot_of = {t.lower(): i for i, t in reversed(list(enumerate(topics)))}
    renumber: dict[str, str] = {}

    def node(name: str) -> str | None:
        if is_placeholder(name):
            return renumber.setdefault(name, f"[ENT{len(renumber) + 1}]")
        slot = slot_of.get(name.lower())
        return None if slot is None else f"{{{slot}}}"

    triples = []
    for t in schema.triples:
        head, tail = node(t.head), node(t.tail)
        if head is None or tail is None:
            return None
        triples.append((head, t.relation, tail))
    answer = node(schema.answer)
    if answer is None:
        return None
    return Template(tuple(triples), answer)
