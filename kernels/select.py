"""Selection primitives for the frontier: running argmax, running top-k merge, stable top-k.

Ties always go to the lower position, which for incident-triple windows read in CSR order means
the lower triple id; ``jax.lax.top_k`` already breaks ties that way (a test pins it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

NEG_INF = -jnp.inf


def running_argmax(best_val: jax.Array, best_id: jax.Array, vals: jax.Array, ids: jax.Array):
    """Fold a window [F, D] into a running maximum [F]; the earlier value wins ties.

    ``vals`` must hold -inf where an entry is invalid. The running value only moves on a strict
    improvement, exactly like a sequential ``if score > best`` loop over the entries in order.
    """
    pos = jnp.argmax(vals, axis=-1)
    window_best = jnp.take_along_axis(vals, pos[..., None], axis=-1)[..., 0]
    window_id = jnp.take_along_axis(ids, pos[..., None], axis=-1)[..., 0]
    better = window_best > best_val
    return jnp.where(better, window_best, best_val), jnp.where(better, window_id, best_id)


def running_argmax_reference(best_val, best_id, vals, ids):
    best_val, best_id = np.array(best_val, copy=True), np.array(best_id, copy=True)
    for f in range(vals.shape[0]):
        for d in range(vals.shape[1]):
            if vals[f, d] > best_val[f]:
                best_val[f], best_id[f] = vals[f, d], ids[f, d]
    return best_val, best_id


def merge_topk(run_vals: jax.Array, run_ids: jax.Array, vals: jax.Array, ids: jax.Array):
    """Keep the K best of a running top-K [F, K] plus a new window [F, D]; -inf marks invalid.

    Running entries precede the window, so on ties the earlier-seen entry is kept.
    """
    k = run_vals.shape[-1]
    all_vals = jnp.concatenate([run_vals, vals], axis=-1)
    all_ids = jnp.concatenate([run_ids, ids], axis=-1)
    top_vals, pos = jax.lax.top_k(all_vals, k)
    return top_vals, jnp.take_along_axis(all_ids, pos, axis=-1)


def merge_topk_reference(run_vals, run_ids, vals, ids):
    k = run_vals.shape[-1]
    out_vals = np.full_like(run_vals, -np.inf)
    out_ids = np.array(run_ids, copy=True)
    for f in range(run_vals.shape[0]):
        entries = list(zip(run_vals[f].tolist() + vals[f].tolist(), run_ids[f].tolist() + ids[f].tolist(), strict=True))
        order = sorted(range(len(entries)), key=lambda i: (-entries[i][0], i))[:k]
        out_vals[f] = [entries[i][0] for i in order]
        out_ids[f] = [entries[i][1] for i in order]
    return out_vals, out_ids
