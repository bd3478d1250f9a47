"""Padded CSR gather: the incident-triple lookup the tracer and subgraph code are built on."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

INVALID = -1


@jax.jit(static_argnames=("width",))
def gather_padded(offsets: jax.Array, values: jax.Array, rows: jax.Array, width: int, skip: jax.Array | int = 0):
    """Rows of a CSR matrix as a fixed-width padded block, optionally from column ``skip`` on.

    Reading a hub's thousands of entries in windows of ``width`` (``skip`` = 0, D, 2D, ...)
    keeps every shape fixed without padding all rows to the largest degree.

    Args:
      offsets: int [n + 1] row offsets into ``values``.
      values: int32 [nnz] column entries (for the KG: incident triple ids).
      rows: int32 [F] rows to read; negative rows are padding and read nothing.
      width: static output width D.
      skip: entries of each row to skip first (traced; the window's start).

    Returns:
      (ids int32 [F, D] with INVALID past each row's end, mask bool [F, D],
       overflow int32 [F] = entries of the row after the window).
    """
    valid_row = rows >= 0
    safe = jnp.where(valid_row, rows, 0)
    row_start = offsets[safe]
    start = row_start + skip
    length = jnp.where(valid_row, offsets[safe + 1] - start, 0)
    length = jnp.maximum(length, 0)
    cols = jnp.arange(width, dtype=offsets.dtype)
    mask = cols[None, :] < length[:, None]
    index = jnp.clip(start[:, None] + cols[None, :], 0, max(values.shape[0] - 1, 0))
    ids = jnp.where(mask, values[index], INVALID).astype(jnp.int32)
    overflow = jnp.maximum(length - width, 0).astype(jnp.int32)
    return ids, mask, overflow


def gather_padded_reference(offsets: np.ndarray, values: np.ndarray, rows: np.ndarray, width: int, skip: int = 0):
    """Plain NumPy loop with the same contract as :func:`gather_padded`."""
    ids = np.full((len(rows), width), INVALID, dtype=np.int32)
    overflow = np.zeros(len(rows), dtype=np.int32)
    for i, row in enumerate(rows):
        if row < 0:
            continue
        entries = values[offsets[row] : offsets[row + 1]][skip:]
        ids[i, : min(width, len(entries))] = entries[:width]
        overflow[i] = max(len(entries) - width, 0)
    return ids, ids != INVALID, overflow
