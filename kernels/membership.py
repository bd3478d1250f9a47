"""Set membership by binary search in small sorted rows: used triples and guidance entities per run.

A run's barred triples (or its guidance entities) are a short row of ids, so membership is tested by a
branch-free binary search in that row: log2(C) + 1 gathers per query from a table bounded by the static
shapes, whatever the KG's size (no [runs x m] bitmap to zero or scatter per call).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

BIG = np.iinfo(np.int32).max  # the empty entry of a sorted row: sorts last and matches no id


def sorted_rows(rows: jax.Array) -> jax.Array:
    """int32 [B, C] rows of ids (-1 = empty) as ascending rows for :func:`row_contains`: empty entries become
    int32 max, and C is rounded up to a power of two."""
    width = rows.shape[1]
    padded = 1 << max(width - 1, 0).bit_length()
    rows = jnp.pad(jnp.where(rows >= 0, rows, BIG), ((0, 0), (0, padded - width)), constant_values=BIG)
    return jnp.sort(rows, axis=-1)


def row_contains(rows: jax.Array, row: jax.Array, value: jax.Array) -> jax.Array:
    """bool [Q]: whether ``value[i]`` occurs in ``rows[row[i]]``.

    ``rows`` int32 [B, C] from :func:`sorted_rows` (C a power of two, each row ascending); ``row``, ``value``
    int32 [Q]."""
    width = rows.shape[1]
    flat = rows.reshape(-1)
    pos = row * width  # the last entry of the row below ``value`` is before pos + step, or pos stays
    step = width // 2
    while step:
        pos = jnp.where(flat[pos + step - 1] < value, pos + step, pos)
        step //= 2
    return flat[pos] == value


def row_contains_reference(rows: np.ndarray, row: np.ndarray, value: np.ndarray) -> np.ndarray:
    """:func:`sorted_rows` then :func:`row_contains` on the unsorted rows, as a set lookup per query."""
    sets = [{int(v) for v in r if v >= 0} for r in np.asarray(rows)]
    return np.array([int(v) in sets[int(r)] for r, v in zip(row, value, strict=True)], bool)
