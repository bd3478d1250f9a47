"""Streamed GNN inference pieces: the stamp-array subgraph expander (gnn/expand.py), the tiered reach
bin plan (packing.plan_reach_work) and the one-key top-K order (infer._top_order), each against a
plain reference; and predict_top on unordered graphs against the per-question reference path."""

import jax
import numpy as np
import pytest
from gnn_cases import hub_kg_queries
from hypothesis import given, settings
from hypothesis import strategies as st

from stem_jax.gnn.batching import MAX_SCHEMA_TRIPLES, build_example
from stem_jax.gnn.expand import SubgraphExpander, graph_set_unordered
from stem_jax.gnn.guidance import select_top
from stem_jax.gnn.infer import _top_order, predict, predict_top
from stem_jax.gnn.model import ModelSpec, init_params
from stem_jax.gnn.multihop import graph_set
from stem_jax.gnn.packing import REACH_TIERS, ReachShape, plan_reach_work, reach_index
from stem_jax.kg.index import build_index
from stem_jax.kg.subgraph import khop_subgraph

entity = st.one_of(st.integers(0, 1), st.integers(0, 24))  # 0 and 1 are drawn often: hubs
triples_strategy = st.lists(st.tuples(entity, st.sampled_from(["r0", "r1", "r2"]), entity), min_size=1, max_size=80)


def _index(triples):
    return build_index([(f"e{h}", r, f"e{t}") for h, r, t in triples])


def _schema(rng, count, width):
    schema = np.zeros((count, MAX_SCHEMA_TRIPLES, width), np.float32)
    mask = np.zeros((count, MAX_SCHEMA_TRIPLES), bool)
    for i in range(count):
        t = int(rng.integers(1, 4))
        schema[i, :t] = rng.standard_normal((t, width))
        mask[i, :t] = True
    return schema, mask


def _edge_multiset(entities, senders, receivers, relations):
    return sorted(zip(entities[senders].tolist(), entities[receivers].tolist(), relations.tolist(), strict=True))


@settings(max_examples=80, deadline=None)
@given(triples_strategy, st.integers(1, 6), st.integers(0, 8), st.data())
def test_unordered_graph_set_has_build_example_nodes_and_edges(triples, count, hub_cap, data):
    """Same node set, question flags and edge multiset as the per-question builder, one expander
    reused across queries (stale stamps would leak nodes of earlier queries), repeated queries shared."""
    index = _index(triples)
    seeds = [data.draw(st.lists(st.integers(0, index.num_entities - 1), min_size=1, max_size=3)) for _ in range(count)]
    hops = [data.draw(st.integers(0, 4)) for _ in range(count)]
    if count > 1:
        seeds[-1], hops[-1] = list(reversed(seeds[0])), hops[0]
    expander = SubgraphExpander(index, hub_cap)
    for s, h in zip(seeds, hops, strict=True):
        nodes, triple_ids = expander.expand(s, h)
        one = khop_subgraph(index, s, h, hub_cap)
        np.testing.assert_array_equal(np.sort(nodes), one.nodes)
        np.testing.assert_array_equal(np.sort(triple_ids), one.triple_ids)
    schema, mask = _schema(np.random.default_rng(0), count, 6)
    graphs = graph_set_unordered(index, seeds, hops, hub_cap, schema, mask, expander)
    for i in range(count):
        ref = build_example(index, seeds[i], hops[i], hub_cap, schema[i][mask[i]])
        nodes = slice(graphs.node_ptr[i], graphs.node_ptr[i + 1])
        edges = slice(graphs.edge_ptr[i], graphs.edge_ptr[i + 1])
        entities = graphs.entities[nodes]
        order = np.argsort(entities)
        np.testing.assert_array_equal(entities[order], ref.entities)
        np.testing.assert_array_equal(graphs.question[nodes][order], ref.question)
        assert _edge_multiset(entities, graphs.senders[edges], graphs.receivers[edges], graphs.relations[edges]) == \
            _edge_multiset(ref.entities, ref.senders, ref.receivers, ref.relations)


def test_expander_refuses_another_kg():
    index = _index([(0, "r0", 1)])
    other = _index([(0, "r0", 1), (1, "r1", 2)])
    schema, mask = _schema(np.random.default_rng(0), 1, 3)
    with pytest.raises(ValueError, match="another KG"):
        graph_set_unordered(other, [[0]], [1], 5, schema, mask, SubgraphExpander(index, 5))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 120), st.integers(16, 400))
def test_plan_reach_work_places_every_graph_once_within_capacity(seed, count, max_edges):
    rng = np.random.default_rng(seed)
    demand = np.zeros((count, 7), np.int64)
    demand[:, 0] = rng.integers(1, 6, count)
    demand[:, 1] = rng.integers(0, 30, count)
    demand[:, 2] = rng.zipf(1.5, count).clip(max=5000)  # a few very large graphs
    demand[:, 3] = (demand[:, :3].sum(axis=1) * rng.uniform(1, 4, count)).astype(np.int64)
    demand[:, 4] = rng.integers(0, 4, count)
    demand[:, 5] = rng.integers(0, 20, count)
    demand[:, 6] = 1
    work = plan_reach_work(demand, max_edges=max_edges, max_graphs=16)
    placed = np.sort(np.concatenate([members for members, _ in work]))
    np.testing.assert_array_equal(placed, np.arange(count))
    for members, shape in work:
        assert np.all(demand[members].sum(axis=0) <= shape.as_array())
    assert len({shape for _, shape in work}) <= REACH_TIERS
    # a second plan with the first plan's shapes known compiles nothing new
    known = {shape for _, shape in work}
    again = plan_reach_work(demand, max_edges=max_edges, max_graphs=16, known=known)
    assert {shape for _, shape in again} <= known


def test_plan_reach_work_reuses_a_slightly_larger_known_shape_only():
    demand = np.tile(np.asarray([[2, 10, 40, 120, 2, 12, 1]], np.int64), (50, 1))
    fresh = {shape for _, shape in plan_reach_work(demand, max_edges=1024)}
    (shape,) = fresh
    bigger = ReachShape(*[int(x) for x in shape.as_array()[:6] + 8], graphs=shape.graphs)
    huge = ReachShape(*[int(x) * 4 for x in shape.as_array()])
    assert {s for _, s in plan_reach_work(demand, max_edges=1024, known={bigger})} == {bigger}
    assert {s for _, s in plan_reach_work(demand, max_edges=1024, known={huge})} == fresh


def test_small_calls_in_turn_stop_compiling():
    """One question's plans at a time (ask, batch-1 bench): after a few calls every call finds a known
    shape; each bin still holds its graphs."""
    rng = np.random.default_rng(7)
    known: set[ReachShape] = set()
    compiled_per_call = []
    for _ in range(60):
        count = int(rng.integers(1, 5))  # a question's beams
        demand = np.zeros((count, 7), np.int64)
        demand[:, 0] = rng.integers(1, 4, count)
        demand[:, 1] = rng.integers(0, 40, count)
        demand[:, 2] = rng.integers(0, 400, count)
        demand[:, 3] = (demand[:, :3].sum(axis=1) * rng.uniform(1, 3, count)).astype(np.int64)
        demand[:, 4] = rng.integers(0, 4, count)
        demand[:, 5] = rng.integers(0, 60, count)
        demand[:, 6] = 1
        work = plan_reach_work(demand, known=known)
        for members, shape in work:
            assert np.all(demand[members].sum(axis=0) <= shape.as_array())
        new = {shape for _, shape in work} - known
        compiled_per_call.append(len(new))
        known |= new
    assert 1 <= sum(compiled_per_call) <= 3 and sum(compiled_per_call[20:]) == 0, compiled_per_call


def test_large_tiers_do_not_take_a_much_larger_known_shape():
    """The compile-cost allowance is per call, spread over the tier's bins: a 1,000-graph tier keeps
    its fresh shape rather than padding every bin up to a known shape four times its size."""
    demand = np.tile(np.asarray([[2, 10, 40, 120, 2, 12, 1]], np.int64), (1000, 1))
    (fresh,) = {shape for _, shape in plan_reach_work(demand)}
    huge = ReachShape(*[int(x) * 4 for x in fresh.as_array()])
    assert {s for _, s in plan_reach_work(demand, known={huge})} == {fresh}


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 40), st.booleans())
def test_top_order_equals_lexsort(seed, count, wide_entities):
    """Ties in probability (frequent: symmetric nodes get equal states) break by entity id; entity ids
    too wide for one int64 key take the lexsort path."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    graph = np.sort(rng.integers(0, count, n))
    probs = rng.choice(np.asarray([0.0, 0.25, 0.5, 1.0, *rng.random(5)], np.float32), n)
    high = 2**40 if wide_entities else 5000
    entities = np.zeros(n, np.int64)
    for g in np.unique(graph):  # unique within a graph, like a subgraph's nodes
        where = graph == g
        entities[where] = rng.choice(high, where.sum(), replace=False)
    np.testing.assert_array_equal(_top_order(probs, graph, entities, count), np.lexsort((entities, -probs, graph)))


@pytest.mark.parametrize(("seed", "method"), [(0, "reach"), (1, "reach"), (2, "full")])
def test_predict_top_on_unordered_graphs_matches_per_question_predict(seed, method):
    """The streamed path (expander graphs, tiered reach bins or the plain forward after assemble's
    sort) against build_example + predict + select_top per question, on a random KG with hubs."""
    rng = np.random.default_rng(seed)
    count = 40
    index, seeds, hops = hub_kg_queries(rng, count)
    d_pem = 8
    schema, mask = _schema(rng, count, 3 * d_pem)
    spec = ModelSpec(layers=3, d_gnn=16, d_pem=d_pem, num_relations=index.num_relations)
    params = jax.tree.map(lambda x: np.asarray(x) + 0.3 * rng.standard_normal(np.shape(x)).astype(np.float32),
                          init_params(spec, jax.random.key(seed)))
    relation_emb = rng.standard_normal((index.num_relations, d_pem)).astype(np.float32)
    graphs = graph_set_unordered(index, seeds, hops, 20, schema, mask)
    assert not np.array_equal(graphs.receivers, graph_set(index, seeds, hops, 20, schema, mask).receivers)
    width = 16
    ids, probs, stats = predict_top(params, spec, graphs, relation_emb, width, max_edges=128, max_graphs=8,
                                    method=method)
    assert stats["batches"] > 2
    examples = [build_example(index, seeds[i], hops[i], 20, schema[i][mask[i]]) for i in range(count)]
    reference = predict(params, spec, examples, relation_emb)
    assert reach_index(graphs).demand[:, 2].max() > 0  # some graphs have nodes at D >= 3
    for i, (example, p) in enumerate(zip(examples, reference, strict=True)):
        top, top_p = select_top(p, example.entities, width)
        k = len(top)
        np.testing.assert_allclose(probs[i, :k], top_p, rtol=0, atol=1e-5)
        assert np.all(ids[i, k:] == -1) and np.all(probs[i, k:] == 0)
        for j in np.flatnonzero(ids[i, :k] != top):  # only inside a run of near-tied probabilities
            assert np.sum(np.abs(top_p - top_p[j]) < 1e-5) > 1
