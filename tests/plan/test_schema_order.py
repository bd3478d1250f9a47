"""The schema graph's tracing order, template filling and topic masking against plain references.

The planner's fast paths (a tracing order worked out once per shape, slots parsed once per template,
compiled mention patterns kept) must give what the direct algorithms give, on random inputs."""

from __future__ import annotations

import re

import numpy as np
import pytest

from stem_jax.plan.question_text import mask_topics
from stem_jax.plan.schema import SchemaGraph, SchemaTriple, TraceStep
from stem_jax.plan.templates import SLOT, Template


def reference_dfs_order(schema: SchemaGraph, anchor: str) -> list[TraceStep]:
    """Algorithm 1's MATCH over names, scanning the triples for each node's incident edges."""
    steps: list[TraceStep] = []
    seen_edges: set[int] = set()
    seen_nodes = {anchor}

    def visit(node: str) -> None:
        for edge in (i for i, t in enumerate(schema.triples) if node in (t.head, t.tail)):
            if edge in seen_edges:
                continue
            triple = schema.triples[edge]
            child = triple.tail if triple.head == node else triple.head
            seen_edges.add(edge)
            if child in seen_nodes:
                continue
            seen_nodes.add(child)
            steps.append(TraceStep(edge, node, child))
            visit(child)

    visit(anchor)
    return steps


def random_schema(rng: np.random.Generator) -> SchemaGraph:
    names = ["Kismet", "Germany", "[ENT1]", "[ENT2]", "[ENT3]", "1999"][: rng.integers(2, 7)]
    triples = tuple(SchemaTriple(str(rng.choice(names)), f"r{rng.integers(3)}", str(rng.choice(names)))
                    for _ in range(rng.integers(1, 6)))  # cycles, self-loops and parallel edges included
    nodes = list(dict.fromkeys(n for t in triples for n in (t.head, t.tail)))
    return SchemaGraph(triples=triples, answer=str(rng.choice(nodes)))


@pytest.mark.parametrize("seed", range(5))
def test_dfs_order_matches_the_plain_walk_from_every_anchor(seed):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        schema = random_schema(rng)
        for anchor in schema.nodes():
            assert schema.dfs_order(anchor) == reference_dfs_order(schema, anchor)
        assert schema.constants() == [n for n in schema.nodes() if not n.startswith("[ENT")]


def test_template_instantiate_fills_slots_as_the_plain_substitution():
    rng = np.random.default_rng(7)
    nodes = ["{0}", "{1}", "[ENT1]", "[ENT2]", "USA"]
    for _ in range(300):
        triples = tuple((str(rng.choice(nodes)), f"r{rng.integers(3)}", str(rng.choice(nodes)))
                        for _ in range(rng.integers(1, 4)))
        flat = [n for h, _, t in triples for n in (h, t)]
        template = Template(triples=triples, answer=str(rng.choice(flat)))
        topics = ["Kismet", "Fury", "Paris"][: rng.integers(0, 4)]

        def fill(node: str, topics: list[str] = topics) -> str:
            m = SLOT.match(node)
            return topics[int(m.group(1))] if m else node

        got = template.instantiate(topics, "Breadth")
        if len(topics) < template.slots:
            assert got is None
            continue
        want = SchemaGraph(triples=tuple(SchemaTriple(fill(h), r, fill(t)) for h, r, t in triples),
                           answer=fill(template.answer), strategy="Breadth")
        assert got == want


def test_mask_topics_masks_as_a_fresh_pattern_for_many_distinct_mentions():
    mentions = [f"Film {i} (Part {i % 7})" for i in range(700)]  # more names than re's own pattern cache holds
    for i, mention in enumerate(mentions):
        text = f"who directed  {mention.upper()} and film {i}"
        want = re.sub(r"\s+", " ", re.compile(re.escape(mention), re.IGNORECASE).sub("X", text)).strip()
        assert mask_topics(text, [mention]) == (want, True)
    assert mask_topics("who directed it", ["Fury"]) == ("who directed it", False)
