"""All-pairs shortest paths on the schema graph (SAFE §5 "Preprocessing") and the edge distance D_edge (§4.2).

SAFE precomputes APSP once, offline, on the compact schema graph (types as nodes), so the distance
join never walks the KG. :func:`floyd_warshall` is the jitted min-plus loop (one ``fori_loop``
step per pivot, each a vectorised ``[n, n]`` relaxation); :func:`floyd_warshall_reference` is
the textbook triple loop it is tested against. Unreachable pairs are ``inf``.

``D_edge(α, β) = min over x1 ∈ {c1, c1'}, x2 ∈ {c2, c2'} of D_node(x1, x2)``: two schema edges
that share a type are at distance 0. :func:`edge_distance` evaluates it for many pairs at once
(a gather and a 4-way minimum); :func:`edge_distance_matrix` for all pairs of a small edge set.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def _floyd_warshall(weights: jax.Array) -> jax.Array:
    n = weights.shape[0]
    dist = jnp.minimum(weights, jnp.where(jnp.eye(n, dtype=bool), 0.0, jnp.inf))

    def relax(k, d):
        return jnp.minimum(d, d[:, k, None] + d[None, k, :])

    return jax.lax.fori_loop(0, n, relax, dist)


def floyd_warshall(weights: np.ndarray) -> np.ndarray:
    """Shortest-path lengths between all node pairs of a directed graph.

    Args:
      weights: float [n, n]; ``weights[u, v]`` is the length of edge u -> v (non-negative), ``inf``
        where there is none. The diagonal is treated as 0.

    Returns:
      float32 [n, n] distances, ``inf`` for unreachable pairs. The size is padded to a power of
      two (isolated padding nodes), so graphs of similar size share one compilation.
    """
    weights = np.asarray(weights, dtype=np.float32)
    n = weights.shape[0]
    if weights.shape != (n, n):
        raise ValueError(f"weights must be square, got {weights.shape}")
    if n == 0:
        return weights.copy()
    size = 1 << max(0, (n - 1).bit_length())
    padded = np.full((size, size), np.inf, dtype=np.float32)
    padded[:n, :n] = weights
    return np.asarray(_floyd_warshall(jnp.asarray(padded)))[:n, :n]


def floyd_warshall_reference(weights: np.ndarray) -> np.ndarray:
    """Plain triple-loop Floyd–Warshall (Cormen et al.), the reference :func:`floyd_warshall` is tested against."""
    dist = np.array(weights, dtype=np.float64)
    n = dist.shape[0]
    for i in range(n):
        dist[i, i] = min(dist[i, i], 0.0)
    for k in range(n):
        for i in range(n):
            for j in range(n):
                if dist[i, k] + dist[k, j] < dist[i, j]:
                    dist[i, j] = dist[i, k] + dist[k, j]
    return dist.astype(np.float32)


def schema_adjacency(num_types: int, edges: np.ndarray) -> np.ndarray:
    """Unit-weight, undirected adjacency of the schema graph from its edges ``[S, 3]`` (c, r, c').

    Undirected because a query edge may be realised in either direction of a KG relation; the
    distance join asks whether two types are *connected* within δ hops, not which way.
    """
    weights = np.full((num_types, num_types), np.inf, dtype=np.float32)
    if len(edges):
        weights[edges[:, 0], edges[:, 2]] = 1.0
        weights[edges[:, 2], edges[:, 0]] = 1.0
    return weights


def edge_distance(node_distance: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """``D_edge`` between schema edges ``alpha[i]`` and ``beta[i]`` (each ``[..., 3]`` rows (c, r, c')), elementwise."""
    alpha = np.asarray(alpha)
    beta = np.asarray(beta)
    ends_a = alpha[..., [0, 2]]
    ends_b = beta[..., [0, 2]]
    pairs = node_distance[ends_a[..., :, None], ends_b[..., None, :]]  # [..., 2, 2]
    return pairs.min(axis=(-2, -1))


def edge_distance_matrix(node_distance: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``D_edge`` for every pair of ``edges`` [S, 3]: float [S, S]."""
    edges = np.asarray(edges)
    return edge_distance(node_distance, edges[:, None, :], edges[None, :, :])


def edge_distance_reference(node_distance: np.ndarray, a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """The definition of ``D_edge`` for one pair, written out (test reference)."""
    return float(min(node_distance[x1, x2] for x1 in (a[0], a[2]) for x2 in (b[0], b[2])))
