"""Cosine from stored embedding rows, float16 or compact (int8 codes with a per-row scale, a fitted projection).

A stored row approximates a unit-norm encoder vector ``e`` (dimension d) as ``e ≈ mean + basis @ (scale · code)``,
with ``basis`` [d, k] orthonormal columns, ``mean`` [d], ``code`` [k] (int8 or float16) and ``scale`` a float32
per row. The cosine with a unit-norm query ``q`` is then

    q · e ≈ scale · (code · (basisᵀ q)) + q · mean

so a query is projected once (:func:`project_queries`, [.., d] -> [.., k] plus one bias per query) and every
scored edge reads k code bytes and one scale (:func:`gathered_dots`) instead of d float16 values. The float16
table is the case with no basis, no mean and no scale: the same operations as a plain gathered dot product.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

F32 = np.float32


def project_queries(queries: jax.Array, basis: jax.Array | None, mean: jax.Array | None
                    ) -> tuple[jax.Array, jax.Array | None]:
    """``queries`` float [..., d] -> (float32 [..., k] in the rows' space, float32 [...] bias, or None without a mean)."""
    q = queries.astype(jnp.float32)
    bias = None if mean is None else jnp.einsum("...d,d->...", q, mean.astype(jnp.float32))
    if basis is not None:
        q = jnp.einsum("...d,dk->...k", q, basis.astype(jnp.float32))
    return q, bias


def gathered_dots(table: jax.Array, scale: jax.Array | None, rows: jax.Array, queries: jax.Array,
                  bias: jax.Array | None) -> jax.Array:
    """float32 [W]: row ``rows[w]`` of ``table`` [m, k] (float16, float32 or int8) dotted with ``queries[w]``
    [W, k] (projected), times ``scale[rows[w]]`` when there is a scale, plus ``bias[w]`` when there is a bias."""
    dots = jnp.einsum("wk,wk->w", table[rows].astype(jnp.float32), queries)
    if scale is not None:
        dots = dots * scale[rows]
    if bias is not None:
        dots = dots + bias
    return dots


def project_queries_reference(queries: np.ndarray, basis: np.ndarray | None, mean: np.ndarray | None,
                              ) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`project_queries`, one query at a time in float32."""
    q = np.asarray(queries, F32)
    flat = q.reshape(-1, q.shape[-1])
    k = q.shape[-1] if basis is None else basis.shape[1]
    proj = np.zeros((flat.shape[0], k), F32)
    bias = np.zeros(flat.shape[0], F32)
    for i, row in enumerate(flat):
        proj[i] = row if basis is None else row @ np.asarray(basis, F32)
        if mean is not None:
            bias[i] = F32(np.dot(row, np.asarray(mean, F32)))
    return proj.reshape(*q.shape[:-1], k), None if mean is None else bias.reshape(q.shape[:-1])


def gathered_dots_reference(table: np.ndarray, scale: np.ndarray | None, rows: np.ndarray, queries: np.ndarray,
                            bias: np.ndarray | None) -> np.ndarray:
    """:func:`gathered_dots`, one edge at a time in float32 (the same operation order)."""
    out = np.zeros(len(rows), F32)
    for w, r in enumerate(np.asarray(rows).tolist()):
        dot = F32(np.dot(np.asarray(table[r], F32), np.asarray(queries[w], F32)))
        if scale is not None:
            dot = F32(dot * F32(scale[r]))
        if bias is not None:
            dot = F32(dot + F32(bias[w]))
        out[w] = dot
    return out
