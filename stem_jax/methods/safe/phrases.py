"""Pseudo query graphs in words: the planner's templates rendered with relation phrases that are not KG ids.

SAFE's LLM writes its pseudo query graph in its own words ("film director", not ``directed_by``), and ADJ
is what aligns those words to the KG's schema. The engine's planners emit exact KG relation ids, which
leaves ADJ nothing to do; :func:`render` rewrites a planned :class:`~stem_jax.plan.schema.SchemaGraph`
(read through the planner's public API) with a phrase per relation, as an LLM would write it:

- MetaQA's relations get the wording of :data:`METAQA_PHRASES` (none is a KG relation or its readable
  form), the kind of name an LLM writes for a film KG;
- any other relation gets a phrase built from its last path segment (``/people/person/nationality`` ->
  "nationality of"), never the id itself.

Node types stay what the paper's LLM predicts per node: the planner's template fixes the relation, so
:class:`Rendered` keeps the relation's signature (domain and range type) beside each phrase; the typed
triple text ADJ embeds is then ``type phrase type``.
"""

from __future__ import annotations

import dataclasses

from stem_jax.plan.schema import SchemaGraph, SchemaTriple

METAQA_PHRASES = {
    "directed_by": "film director", "written_by": "screenwriter", "starred_actors": "cast member",
    "release_year": "release date", "in_language": "spoken language", "has_tags": "keyword",
    "has_genre": "film genre", "has_imdb_rating": "rating", "has_imdb_votes": "popularity",
}


def phrase(relation: str) -> str:
    """A word phrase for ``relation`` that is not the KG id (see the module docstring)."""
    if relation in METAQA_PHRASES:
        return METAQA_PHRASES[relation]
    last = relation.rstrip("/").rsplit("/", 1)[-1].rsplit(".", 1)[-1]
    words = " ".join(w for w in last.replace("_", " ").split() if w)
    text = f"{words} of" if words else "related to"
    return text if text != relation else f"{text} (phrase)"


@dataclasses.dataclass(frozen=True)
class Rendered:
    """A schema graph with phrased relations, and each phrase's source relation (for types and audits)."""

    schema: SchemaGraph
    source: dict[str, str]  # phrase -> KG relation id it was rendered from


def render(schema: SchemaGraph) -> Rendered:
    """``schema`` with every relation replaced by :func:`phrase`; nodes, answer and strategy unchanged."""
    source = {phrase(t.relation): t.relation for t in schema.triples}
    triples = tuple(SchemaTriple(t.head, phrase(t.relation), t.tail) for t in schema.triples)
    return Rendered(dataclasses.replace(schema, triples=triples), source)
