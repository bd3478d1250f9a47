"""CSR gather of a frontier's incident triples: the edge list the tracer scores, one block at a time.

A step's frontier is a flat list of P (run, node) pairs. Their incident triples, laid end to end in
pair order (each node's in CSR order), form the step's global edge list, whose length is the sum of the
frontier degrees. :func:`frontier_edge_offsets` gives each pair's start in that list and
:func:`gather_edges` reads any fixed-width block of it, so the work follows the real number of incident
triples instead of padding every node to the largest degree.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def frontier_edge_offsets(degree: jax.Array, nodes: jax.Array) -> jax.Array:
    """int32 [P + 1]: where each pair's incident triples start in the step's edge list (last: its length).

    ``degree`` int32 [n] per KG node; ``nodes`` int32 [P], -1 for an empty pair (no edges)."""
    counts = jnp.where(nodes >= 0, degree[jnp.maximum(nodes, 0)], 0)
    return jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(counts).astype(jnp.int32)])


def gather_edges(offsets: jax.Array, incidence: jax.Array, cum: jax.Array, nodes: jax.Array, start: jax.Array,
                 width: int) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Edges ``[start, start + width)`` of the edge list :func:`frontier_edge_offsets` describes.

    Args:
      offsets: int32 [n + 1] the KG's CSR row offsets; ``incidence`` int32 [>= 2m] the incident triple ids.
      cum: int32 [P + 1] from :func:`frontier_edge_offsets`; ``nodes`` int32 [P] the pairs' nodes.
      start: int32 scalar (traced) first position; ``width``: static block width W.

    Returns:
      (pair int32 [W], node int32 [W], triple int32 [W], valid bool [W]); past the list's end ``valid`` is
      False and the other entries are placeholders (pair P - 1, node 0, the incidence list's first triple).
    """
    n_pairs = nodes.shape[0]
    pos = start + jnp.arange(width, dtype=jnp.int32)
    valid = pos < cum[-1]
    pair = jnp.clip(jnp.searchsorted(cum, pos, side="right") - 1, 0, n_pairs - 1).astype(jnp.int32)
    node = jnp.where(valid, nodes[pair], 0)
    triple = incidence[jnp.where(valid, offsets[node] + pos - cum[pair], 0)]
    return pair, node, triple, valid


def gather_edges_reference(offsets: np.ndarray, incidence: np.ndarray, degree: np.ndarray, nodes: np.ndarray,
                           start: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`frontier_edge_offsets` then :func:`gather_edges`, as a loop that lists every edge in order."""
    edges = [(p, int(node), int(incidence[offsets[node] + i]))
             for p, node in enumerate(nodes.tolist()) if node >= 0 for i in range(int(degree[node]))]
    pair = np.full(width, len(nodes) - 1, np.int32)
    node = np.zeros(width, np.int32)
    triple = np.full(width, incidence[0], np.int32)
    valid = np.zeros(width, bool)
    for w, (p, v, t) in enumerate(edges[start : start + width]):
        pair[w], node[w], triple[w], valid[w] = p, v, t, True
    return pair, node, triple, valid
