"""SAFE's matching index changes no result: expansion through the CSR relation/neighbour columns and the
per-type entity tables (:meth:`MatchIndex.type_table`) equals a plain expansion (triples gathered per
expansion, each neighbour's types tested per expansion), on random graphs and end to end on the demo KG."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from test_safe import matching_cases

from stem_jax.methods.safe import matching
from stem_jax.methods.safe.matching import BIG, rank_matches


def reference_expand(kg, graph, prepared, step, bound, child_bound):
    """``matching.expand`` written plainly: every triple of the KG visited in turn, in each direction the step
    allows, and each neighbour's types tested one by one."""
    directions = (True, False) if graph.edges[step.edge].undirected else (step.forward,)
    node = None if step.closing else graph.nodes[step.child]
    found = []
    for tid, (head, relation, tail) in enumerate(kg.triples.tolist()):
        for forward in directions:
            source, neighbour = (head, tail) if forward else (tail, head)
            relation_cost = int(prepared.relation_cost[step.edge][relation])
            if source != bound or relation_cost < 0:
                continue
            if step.closing:
                if neighbour != child_bound:
                    continue
                node_cost = 0
            elif node.is_entity:
                node_cost = int(prepared.node_entity_cost(step.child, np.array([neighbour]))[0])
                if node_cost < 0:
                    continue
            elif node.type_cost is not None:
                types = kg.entity_types[neighbour]
                if not (types & node.type_allowed).any():
                    continue
                node_cost = int(np.where(types, node.type_cost, BIG).min())
            else:
                node_cost = 0
            found.append((relation_cost + node_cost, relation, neighbour, tid))
    found.sort()  # the canonical order: cost, then relation, neighbour, triple
    columns = np.array(found, dtype=np.int64).reshape(len(found), 4)
    return columns[:, 2], columns[:, 3], columns[:, 0]


def _key(matches):
    return [(m.score, m.seq, m.nodes, m.triples) for m in matches]


@settings(max_examples=200, deadline=None)
@given(matching_cases())
def test_indexed_expansion_equals_plain_expansion_on_random_graphs(case):
    kg, graph, k, injective = case
    fast = rank_matches(kg, graph, k, injective=injective)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matching, "expand", reference_expand)
        slow = rank_matches(kg, graph, k, injective=injective)
    assert _key(fast) == _key(slow)


def test_safe_on_the_demo_kg_answers_alike_with_plain_expansion(tmp_path):
    from stem_jax.config import EncoderConfig, StemConfig
    from stem_jax.engine import Engine

    engine = Engine.open("demo", config=StemConfig(encoder=EncoderConfig(name="hashing")), planner="oracle",
                         cache_dir=tmp_path)
    questions = list(engine.dataset.questions)[:90]

    def run():
        method = engine.method("safe")
        return [(r.qid, r.answers, r.evidence, r.chains) for r in method.retrieve(questions)]

    fast = run()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matching, "expand", reference_expand)
        slow = run()
    assert fast == slow
    assert sum(len(answers) for _, answers, _, _ in fast) > 0
