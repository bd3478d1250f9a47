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
    """``matching.expand`` written plainly: each expansion gathers its triples and tests each neighbour's types."""

    def incident(node, forward):
        if forward:
            tids = kg.out_triples[kg.out_offsets[node] : kg.out_offsets[node + 1]]
            rows = kg.triples[tids]
            return tids, rows[:, 1], rows[:, 2]
        tids = kg.in_triples[kg.in_offsets[node] : kg.in_offsets[node + 1]]
        rows = kg.triples[tids]
        return tids, rows[:, 1], rows[:, 0]

    edge = graph.edges[step.edge]
    if edge.undirected:
        parts = [incident(bound, True), incident(bound, False)]
        tids = np.concatenate([p[0] for p in parts])
        rels = np.concatenate([p[1] for p in parts])
        nbrs = np.concatenate([p[2] for p in parts])
    else:
        tids, rels, nbrs = incident(bound, step.forward)
    rel_cost = prepared.relation_cost[step.edge][rels]
    keep = rel_cost >= 0
    if step.closing:
        keep &= nbrs == child_bound
        node_cost = np.zeros(len(nbrs), dtype=np.int64)
    else:
        node = graph.nodes[step.child]
        if node.is_entity:
            node_cost = prepared.node_entity_cost(step.child, nbrs)
            keep &= node_cost >= 0
        elif node.type_cost is not None:
            types = kg.entity_types[nbrs]
            keep &= (types & node.type_allowed[None, :]).any(axis=1)
            node_cost = np.where(types, node.type_cost[None, :], BIG).min(axis=1)
        else:
            node_cost = np.zeros(len(nbrs), dtype=np.int64)
    tids, rels, nbrs, cost = tids[keep], rels[keep], nbrs[keep], (rel_cost + node_cost)[keep]
    order = np.lexsort((tids, nbrs, rels, cost))
    return nbrs[order], tids[order], cost[order]


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
