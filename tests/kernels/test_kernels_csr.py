"""The frontier's incident-edge list, read block by block, is the CSR rows of its nodes laid end to end."""

import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.csr import frontier_edge_offsets, gather_edges, gather_edges_reference

N, P, WIDTH = 10, 6, 8  # fixed shapes: one compile; the draws vary degrees, frontier and block start


@st.composite
def frontier_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    degree = rng.integers(0, 6, N)
    degree[rng.integers(0, N)] = draw(st.integers(0, 20))  # a hub wider than a block
    offsets = np.concatenate([[0], np.cumsum(degree)]).astype(np.int32)
    incidence = rng.integers(0, 1000, max(int(offsets[-1]), 1) + 3).astype(np.int32)  # padded past nnz, as 2m is
    nodes = np.where(rng.random(P) < 0.3, -1, rng.integers(0, N, P)).astype(np.int32)
    start = draw(st.integers(0, 4)) * WIDTH
    return offsets, incidence, degree.astype(np.int32), nodes, start


@settings(max_examples=60, deadline=None)
@given(frontier_case())
def test_gather_edges_matches_reference(case):
    offsets, incidence, degree, nodes, start = case
    cum = frontier_edge_offsets(jnp.asarray(degree), jnp.asarray(nodes))
    got = gather_edges(jnp.asarray(offsets), jnp.asarray(incidence), cum, jnp.asarray(nodes), jnp.int32(start), WIDTH)
    want = gather_edges_reference(offsets, incidence, degree, nodes, start, WIDTH)
    assert int(cum[-1]) == int(sum(degree[n] for n in nodes if n >= 0))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), w)


def test_empty_pairs_contribute_no_edges():
    degree = jnp.asarray([2, 3], jnp.int32)
    cum = frontier_edge_offsets(degree, jnp.asarray([-1, 1, -1, 0], jnp.int32))
    assert np.asarray(cum).tolist() == [0, 0, 3, 3, 5]
