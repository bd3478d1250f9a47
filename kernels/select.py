"""Selection primitives over flat, segmented candidate lists: per-segment top-k, first argmax, packing.

Candidates are flat arrays with a segment id each (a frontier pair, or a run); a segment id equal to the
segment count marks a dead entry. Ties are broken by an explicit key (for incident triples: the triple
id, i.e. CSR order), so every result is a deterministic function of the candidate set.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

NEG_INF = -jnp.inf
BIG = np.iinfo(np.int32).max


def rank_within(sorted_keys: jax.Array) -> jax.Array:
    """Position of each entry within its run of equal keys (``sorted_keys`` ascending)."""
    first = jnp.searchsorted(sorted_keys, sorted_keys, side="left")
    return jnp.arange(sorted_keys.shape[0]) - first


def segment_top_k(segment: jax.Array, score: jax.Array, tie: jax.Array, live: jax.Array, k: int, n_segments: int
                  ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Order candidates by (segment, score descending, tie ascending) and mark each segment's best ``k``.

    Args:
      segment: int [C] segment of each candidate; score: float [C]; tie: int [C] (lower wins a tie);
      live: bool [C] (dead entries sort last and are never kept); k: entries kept per segment;
      n_segments: the segment count (the dead entries' key).

    Returns:
      (order int [C] the sorting permutation, key int [C] the sorted segments (``n_segments`` where dead),
       rank int [C] the position within the segment, keep bool [C] live and among the segment's best k).
    """
    key = jnp.where(live, segment, n_segments)
    order = jnp.lexsort((tie, -jnp.where(live, score, 0.0), key))
    key = key[order]
    rank = rank_within(key)
    return order, key, rank, (key < n_segments) & (rank < k)


def segment_top_k_reference(segment, score, tie, live, k: int, n_segments: int):
    """:func:`segment_top_k` by Python's sort of (key, -score, tie, position) tuples."""
    key = [int(s) if v else n_segments for s, v in zip(segment, live, strict=True)]
    neg = [-float(x) if v else 0.0 for x, v in zip(score, live, strict=True)]
    order = sorted(range(len(key)), key=lambda i: (key[i], neg[i], int(tie[i]), i))
    sorted_key = np.array([key[i] for i in order], np.int64)
    rank = np.array([sum(1 for j in range(i) if sorted_key[j] == sorted_key[i]) for i in range(len(order))], np.int64)
    return np.array(order, np.int64), sorted_key, rank, (sorted_key < n_segments) & (rank < k)


def segment_first_max(values: jax.Array, segment: jax.Array, valid: jax.Array, n_segments: int
                      ) -> tuple[jax.Array, jax.Array]:
    """Per segment: the largest valid value (-inf if none) and the position of its first occurrence (int32
    max if none)."""
    values = jnp.where(valid, values, NEG_INF)
    best = jax.ops.segment_max(values, segment, num_segments=n_segments)
    is_max = valid & (values == best[segment])
    order = jnp.where(is_max, jnp.arange(values.shape[0], dtype=jnp.int32), BIG)
    return best, jax.ops.segment_min(order, segment, num_segments=n_segments)


def segment_first_max_reference(values, segment, valid, n_segments: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`segment_first_max` as a loop with a strict ``>`` (the first maximum wins)."""
    best = np.full(n_segments, -np.inf, np.float32)
    first = np.full(n_segments, BIG, np.int32)
    for i, (v, s, ok) in enumerate(zip(values, segment, valid, strict=True)):
        if ok and (first[s] == BIG or v > best[s]):
            best[s], first[s] = v, i
    return best, first


def scatter_packed(dest: tuple[jax.Array, ...], start: jax.Array, mask: jax.Array, values: tuple[jax.Array, ...]
                   ) -> tuple[tuple[jax.Array, ...], jax.Array]:
    """Write the entries of ``values`` where ``mask`` holds, in order, to ``dest`` from position ``start`` on.

    ``dest``: arrays [C] (the buffer; what does not fit is dropped); ``values``: arrays [W]. Returns the
    written buffers and the number of entries written (int32, counting dropped ones)."""
    capacity = dest[0].shape[0]
    slot = jnp.where(mask, start + jnp.cumsum(mask) - 1, capacity)
    out = tuple(a.at[slot].set(v, mode="drop") for a, v in zip(dest, values, strict=True))
    return out, mask.sum().astype(jnp.int32)


def scatter_packed_reference(dest, start: int, mask, values):
    """:func:`scatter_packed` as a loop."""
    out = tuple(np.array(a, copy=True) for a in dest)
    at = start
    for w in np.flatnonzero(mask).tolist():
        if at < len(out[0]):
            for a, v in zip(out, values, strict=True):
                a[at] = v[w]
        at += 1
    return out, int(np.sum(mask))
