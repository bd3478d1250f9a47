"""The global guidance graph (paper §3.3, eqs. 6-7): top-K entities by GNN probability.

K = |T| · K', with |T| the number of schema triples and K' the guidance scale factor (paper
default 4, appendix D.2). A KG triple is in the guidance graph when both its endpoints are.
Ties in probability go to the lower entity id, so selection is deterministic.
"""

from __future__ import annotations

import numpy as np

from stem_jax.kg.index import KGIndex


def guidance_size(num_schema_triples: int, k_prime: int) -> int:
    """K = |T| · K' (eq. 7 and appendix D.2)."""
    if num_schema_triples < 1 or k_prime < 1:
        raise ValueError(f"guidance size needs |T| >= 1 and K' >= 1, got |T|={num_schema_triples}, K'={k_prime}")
    return num_schema_triples * k_prime


def select_top(probs: np.ndarray, entities: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` entities with the highest probability, best first; ties: lower entity id first.

    Args:
      probs: float [n] node probabilities of one graph (real nodes only).
      entities: int [n] their KG entity ids.
      k: how many to keep (fewer when the graph has fewer nodes).

    Returns:
      (entity ids int32 [min(k, n)], their probabilities float32).
    """
    probs = np.asarray(probs, np.float32)
    entities = np.asarray(entities)
    order = np.lexsort((entities, -probs))[:k]
    return entities[order].astype(np.int32), probs[order]


def select_top_reference(probs, entities, k: int) -> tuple[list[int], list[float]]:
    """:func:`select_top` as a plain sort, for tests."""
    ranked = sorted(zip(np.asarray(probs, np.float32).tolist(), np.asarray(entities).tolist(), strict=True),
                    key=lambda pe: (-pe[0], pe[1]))[:k]
    return [int(e) for _, e in ranked], [p for p, _ in ranked]


def entity_mask(num_entities: int, guidance: np.ndarray) -> np.ndarray:
    """bool [n]: the guidance entities (ids < 0 are padding)."""
    mask = np.zeros(num_entities, bool)
    guidance = np.asarray(guidance)
    mask[guidance[guidance >= 0]] = True
    return mask


def triple_mask(index: KGIndex, guidance: np.ndarray) -> np.ndarray:
    """bool [m]: KG triples with both endpoints in the guidance set (what the reference tracer takes)."""
    inside = entity_mask(index.num_entities, guidance)
    return inside[index.triples[:, 0]] & inside[index.triples[:, 2]]


def recall(selected: np.ndarray, gold: np.ndarray) -> float:
    """Share of ``gold`` entities that are in ``selected`` (NaN when there is no gold entity)."""
    gold = np.unique(np.asarray(gold))
    if gold.size == 0:
        return float("nan")
    return float(np.isin(gold, np.asarray(selected)).mean())
