"""Reach-aware Triple-GNN inference (model.reach_logits, packing.assemble_reach) against the plain
TripleGNN forward on random graphs: several question entities, directed-only and inverse edges,
nodes without incoming edges, unreachable nodes, parallel edges, 1 to 4 layers."""

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stem_jax.gnn.batching import MAX_SCHEMA_TRIPLES, GraphExample
from stem_jax.gnn.infer import predict, predict_top
from stem_jax.gnn.model import ModelSpec, init_params
from stem_jax.gnn.multihop import GraphSet, node_distances
from stem_jax.gnn.packing import (
    assemble_reach,
    fresh_reach_shape,
    own_reach_shape,
    pack_reach,
    reach_index,
    schema_means,
)

NUM_RELATIONS = 3
D_PEM = 8


def trained_like_params(spec: ModelSpec, seed: int):
    """init_params with every leaf moved by noise: at init all biases are 0 and LayerNorm is the
    identity, which makes the constant far state c1 = LN(MLP([0; 0])) exactly 0 and would hide
    mistakes in the far-row algebra."""
    params = init_params(spec, jax.random.key(seed))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: np.asarray(x) + 0.3 * rng.standard_normal(np.shape(x)).astype(np.float32), params)


def random_graph_set(rng: np.random.Generator, count: int, max_nodes: int = 40) -> GraphSet:
    node_ptr, edge_ptr = [0], [0]
    question, senders, receivers, relations, entities = [], [], [], [], []
    for _ in range(count):
        n = int(rng.integers(1, max_nodes))
        q = np.zeros(n, bool)
        q[rng.choice(n, int(rng.integers(1, min(n, 3) + 1)), replace=False)] = True
        m = int(rng.integers(0, 3 * n))
        s = rng.integers(0, n, m)
        r = rng.integers(0, n, m)
        t = rng.integers(0, NUM_RELATIONS, m)
        inverse = rng.random(m) < 0.6  # most triples get their inverse edge too, as in the KG graphs
        s, r, t = (np.concatenate([s, r[inverse]]), np.concatenate([r, s[inverse]]),
                   np.concatenate([t, t[inverse] + NUM_RELATIONS]))
        order = np.argsort(r, kind="stable")
        senders.append(s[order])
        receivers.append(r[order])
        relations.append(t[order])
        question.append(q)
        entities.append(np.sort(rng.choice(1000, n, replace=False)))
        node_ptr.append(node_ptr[-1] + n)
        edge_ptr.append(edge_ptr[-1] + len(s))
    schema = np.zeros((count, MAX_SCHEMA_TRIPLES, 3 * D_PEM), np.float32)
    mask = np.zeros((count, MAX_SCHEMA_TRIPLES), bool)
    for i in range(count):
        t = int(rng.integers(1, 4))
        schema[i, :t] = rng.standard_normal((t, 3 * D_PEM))
        mask[i, :t] = True
    cat = np.concatenate
    return GraphSet(node_ptr=np.asarray(node_ptr, np.int64), entities=cat(entities).astype(np.int32),
                    question=cat(question), edge_ptr=np.asarray(edge_ptr, np.int64),
                    senders=cat(senders).astype(np.int32), receivers=cat(receivers).astype(np.int32),
                    relations=cat(relations).astype(np.int32), schema=schema, schema_mask=mask)


def examples_of(graphs: GraphSet) -> list[GraphExample]:
    out = []
    for i in range(len(graphs)):
        nodes = slice(graphs.node_ptr[i], graphs.node_ptr[i + 1])
        edges = slice(graphs.edge_ptr[i], graphs.edge_ptr[i + 1])
        out.append(GraphExample(key=str(i), entities=graphs.entities[nodes], question=graphs.question[nodes],
                                senders=graphs.senders[edges], receivers=graphs.receivers[edges],
                                relations=graphs.relations[edges],
                                schema=graphs.schema[i][graphs.schema_mask[i]]))
    return out


def reference_distances(graphs: GraphSet, i: int) -> np.ndarray:
    """Plain BFS along sender -> receiver edges, capped at 3."""
    lo, hi = graphs.node_ptr[i], graphs.node_ptr[i + 1]
    edges = slice(graphs.edge_ptr[i], graphs.edge_ptr[i + 1])
    dist = [0 if q else 3 for q in graphs.question[lo:hi]]
    for step in (1, 2):
        for s, r in zip(graphs.senders[edges], graphs.receivers[edges], strict=True):
            if dist[s] == step - 1 and dist[r] == 3:
                dist[r] = step
    return np.asarray(dist, np.int8)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 6))
def test_node_distances_match_bfs(seed, count):
    graphs = random_graph_set(np.random.default_rng(seed), count)
    dist = node_distances(graphs, 3)
    for i in range(count):
        np.testing.assert_array_equal(dist[graphs.node_ptr[i] : graphs.node_ptr[i + 1]], reference_distances(graphs, i))


# deeper stacks compile longer (~15-20 s each on 2 cores): slow, run by CI; one and two layers stay quick
DEEP = pytest.mark.slow


@pytest.mark.parametrize(("layers", "seed"), [(1, 0), (2, 1), pytest.param(3, 2, marks=DEEP),
                                              pytest.param(3, 3, marks=DEEP), pytest.param(4, 4, marks=DEEP)])
def test_reach_probabilities_equal_full_forward(layers, seed):
    """Every node's probability, not only the top-K: one bin per graph and one bin for all."""
    rng = np.random.default_rng(seed)
    graphs = random_graph_set(rng, 24)
    spec = ModelSpec(layers=layers, d_gnn=16, d_pem=D_PEM, num_relations=NUM_RELATIONS)
    params = trained_like_params(spec, seed)
    relation_emb = rng.standard_normal((NUM_RELATIONS, D_PEM)).astype(np.float32)
    reference = predict(params, spec, examples_of(graphs), relation_emb)
    reach = reach_index(graphs)
    means = schema_means(graphs)
    from stem_jax.gnn.infer import reach_forward_fn

    forward = reach_forward_fn(layers)
    bins, oversized = pack_reach(reach.demand, fresh_reach_shape(reach.demand, max_edges=10**9))
    assert not oversized and len(bins) == 1
    layouts = [(list(range(len(graphs))), own_reach_shape(reach.demand.sum(axis=0)))]
    layouts += [([i], own_reach_shape(reach.demand[i])) for i in range(len(graphs))]
    for members, shape in layouts:
        batch, rows = assemble_reach(graphs, reach, means, members, shape, NUM_RELATIONS)
        probs = np.asarray(forward(params, batch, relation_emb))[rows]
        expected = np.concatenate([reference[i] for i in members])
        np.testing.assert_allclose(probs, expected, rtol=0, atol=1e-5)


def test_reach_top_ids_equal_full_top_ids():
    """predict_top's two methods give the same ids (outside float32 near ties) and probabilities."""
    rng = np.random.default_rng(7)
    graphs = random_graph_set(rng, 60, max_nodes=80)
    spec = ModelSpec(layers=3, d_gnn=16, d_pem=D_PEM, num_relations=NUM_RELATIONS)
    params = trained_like_params(spec, 7)
    relation_emb = rng.standard_normal((NUM_RELATIONS, D_PEM)).astype(np.float32)
    ids, probs, stats = predict_top(params, spec, graphs, relation_emb, 8, max_edges=256, method="reach")
    assert stats["batches"] > 2
    ref_ids, ref_probs, _ = predict_top(params, spec, graphs, relation_emb, 8, method="full")
    np.testing.assert_allclose(probs, ref_probs, rtol=0, atol=1e-5)
    differ = ids != ref_ids
    # a differing id is allowed only inside a run of probabilities tied within the tolerance
    for q, k in zip(*np.nonzero(differ), strict=True):
        row = ref_probs[q]
        assert np.sum(np.abs(row - row[k]) < 1e-5) > 1


def test_padding_edges_are_dropped():
    """Padding edges point past the segments; a bin far larger than its graphs changes nothing."""
    rng = np.random.default_rng(3)
    graphs = random_graph_set(rng, 5)
    spec = ModelSpec(layers=3, d_gnn=16, d_pem=D_PEM, num_relations=NUM_RELATIONS)
    params = trained_like_params(spec, 3)
    relation_emb = rng.standard_normal((NUM_RELATIONS, D_PEM)).astype(np.float32)
    reach = reach_index(graphs)
    means = schema_means(graphs)
    from stem_jax.gnn.infer import reach_forward_fn

    forward = reach_forward_fn(3)
    members = list(range(len(graphs)))
    tight = own_reach_shape(reach.demand.sum(axis=0))
    loose = own_reach_shape(4 * reach.demand.sum(axis=0) + 64)
    a, rows_a = assemble_reach(graphs, reach, means, members, tight, NUM_RELATIONS)
    b, rows_b = assemble_reach(graphs, reach, means, members, loose, NUM_RELATIONS)
    np.testing.assert_allclose(np.asarray(forward(params, a, relation_emb))[rows_a],
                               np.asarray(forward(params, b, relation_emb))[rows_b], rtol=0, atol=1e-6)


def test_gnn_forwards_trace_at_full_matmul_precision():
    """Both inference forwards are traced under PRECISION (on a GPU the default would be TF32)."""
    from stem_jax.gnn.infer import PRECISION, _at_precision

    seen = []

    def product(a, b):
        seen.append(jax.config.jax_default_matmul_precision)
        return a @ b

    wrapped = _at_precision(jax.jit(product))
    ones = np.ones((2, 2), np.float32)
    np.testing.assert_array_equal(np.asarray(wrapped(ones, ones)), 2 * ones)
    assert seen == [PRECISION] == ["highest"] and wrapped._cache_size() == 1
    assert jax.config.jax_default_matmul_precision != PRECISION  # the setting does not leak out
