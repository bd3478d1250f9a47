"""DistMult message passing with mean (or plain sum) aggregation: the Triple-GNN's per-layer primitive.

For every directed edge ``s -[r]-> t`` the message is ``h[s] * rel[r]`` (DistMult's elementwise
product, paper appendix A eq. 25), and each receiver takes the mean of its incoming messages
(eq. 27); a node without incoming edges aggregates to zero.

``segment_sum`` is used with ``indices_are_sorted`` when the caller promises receivers in
ascending order (the batching code sorts them on the host), which lets XLA use a sorted
reduction instead of a scatter-add on CPU. Record the jax/jaxlib version with any timing of it:
scatter-add has regressed before (jax issues 26227, 38806, 39959).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.jit, static_argnames=("num_nodes", "indices_are_sorted"))
def distmult_mean(
    h: jax.Array,
    rel: jax.Array,
    senders: jax.Array,
    receivers: jax.Array,
    edge_rel: jax.Array,
    edge_mask: jax.Array | None = None,
    *,
    num_nodes: int,
    indices_are_sorted: bool = False,
) -> jax.Array:
    """Mean over incoming edges of ``h[sender] * rel[edge_rel]``.

    Args:
      h: float [N, d] node states.
      rel: float [R, d] relation vectors (already transformed by the layer's g^l).
      senders, receivers: int32 [E] node indices of each directed edge.
      edge_rel: int32 [E] relation index of each edge.
      edge_mask: optional bool [E]; masked edges send nothing and are not counted.
      num_nodes: static N (the segment count).
      indices_are_sorted: receivers are ascending (lets XLA use a sorted segment reduction).

    Returns:
      float [N, d] aggregated messages (zero where a node has no unmasked incoming edge).
    """
    messages = h[senders] * rel[edge_rel]
    weight = jnp.ones(senders.shape, h.dtype) if edge_mask is None else edge_mask.astype(h.dtype)
    messages = messages * weight[:, None]
    total = jax.ops.segment_sum(messages, receivers, num_segments=num_nodes, indices_are_sorted=indices_are_sorted)
    count = jax.ops.segment_sum(weight, receivers, num_segments=num_nodes, indices_are_sorted=indices_are_sorted)
    return total / jnp.maximum(count, 1.0)[:, None]


def distmult_sum(h: jax.Array, rel: jax.Array, senders: jax.Array, receivers: jax.Array, edge_rel: jax.Array, *,
                 num_nodes: int) -> jax.Array:
    """Sum over incoming edges of ``h[sender] * rel[edge_rel]`` (the caller scales by 1 / degree).

    Not jitted on its own: it is traced inline into the caller's program. An edge whose receiver is
    ``num_nodes`` or more (padding) sends nothing."""
    return jax.ops.segment_sum(h[senders] * rel[edge_rel], receivers, num_segments=num_nodes)


def distmult_sum_reference(h, rel, senders, receivers, edge_rel, *, num_nodes: int) -> np.ndarray:
    """Plain loop over edges in float64: what :func:`distmult_sum` must compute."""
    h, rel = np.asarray(h, np.float64), np.asarray(rel, np.float64)
    total = np.zeros((num_nodes, h.shape[1]))
    for e in range(len(senders)):
        if receivers[e] < num_nodes:
            total[receivers[e]] += h[senders[e]] * rel[edge_rel[e]]
    return total


def distmult_mean_reference(h, rel, senders, receivers, edge_rel, edge_mask=None, *, num_nodes: int) -> np.ndarray:
    """Plain loop over edges in float64: what :func:`distmult_mean` must compute."""
    h, rel = np.asarray(h, np.float64), np.asarray(rel, np.float64)
    total = np.zeros((num_nodes, h.shape[1]))
    count = np.zeros(num_nodes)
    for e in range(len(senders)):
        if edge_mask is not None and not edge_mask[e]:
            continue
        total[receivers[e]] += h[senders[e]] * rel[edge_rel[e]]
        count[receivers[e]] += 1
    return total / np.maximum(count, 1)[:, None]
