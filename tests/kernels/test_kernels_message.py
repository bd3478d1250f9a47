import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import distmult_mean, distmult_mean_reference, distmult_sum, distmult_sum_reference

N, E, R, D = 12, 40, 5, 4  # fixed shapes (one compile per sortedness); masks vary the graph


@st.composite
def graph_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(1, N))  # nodes >= n stay isolated
    receivers = rng.integers(0, n, E).astype(np.int32)
    sort = draw(st.booleans())
    if sort:
        receivers = np.sort(receivers)
    return {
        "h": rng.normal(size=(N, D)).astype(np.float32),
        "rel": rng.normal(size=(R, D)).astype(np.float32),
        "senders": rng.integers(0, n, E).astype(np.int32),
        "receivers": receivers,
        "edge_rel": rng.integers(0, R, E).astype(np.int32),
        "mask": rng.random(E) < draw(st.sampled_from([0.0, 0.5, 1.0])),
        "sorted": sort,
    }


@settings(max_examples=40, deadline=None)
@given(graph_case())
def test_distmult_mean_matches_reference(case):
    got = distmult_mean(case["h"], case["rel"], case["senders"], case["receivers"], case["edge_rel"], case["mask"],
                        num_nodes=N, indices_are_sorted=case["sorted"])
    want = distmult_mean_reference(case["h"], case["rel"], case["senders"], case["receivers"], case["edge_rel"],
                                   case["mask"], num_nodes=N)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_isolated_nodes_aggregate_to_zero_and_mean_divides_by_count():
    h = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
    rel = np.array([[1.0, 1.0], [2.0, 0.5]], np.float32)
    out = np.asarray(distmult_mean(h, rel, np.array([0, 1], np.int32), np.array([2, 2], np.int32),
                                   np.array([0, 1], np.int32), num_nodes=3, indices_are_sorted=True))
    np.testing.assert_allclose(out, [[0, 0], [0, 0], [(1 + 6) / 2, (2 + 2) / 2]])


@settings(max_examples=30, deadline=None)
@given(graph_case())
def test_distmult_sum_matches_reference_and_drops_padding_edges(case):
    receivers = np.where(case["mask"], case["receivers"], N).astype(np.int32)  # masked edges as padding (receiver N)
    got = distmult_sum(case["h"], case["rel"], case["senders"], receivers, case["edge_rel"], num_nodes=N)
    want = distmult_sum_reference(case["h"], case["rel"], case["senders"], receivers, case["edge_rel"], num_nodes=N)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
