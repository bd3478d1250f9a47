"""The check every tracer-against-reference property test makes: one batch row's live bindings equal the plain
reference's slot by slot (nodes, via, parents in order, scores to float32 rounding), and so does the overflow."""

from __future__ import annotations

from typing import Any

import numpy as np


def assert_row_equals_reference(out: Any, ref: Any, n_steps: int, *, row: int = 0, atol: float = 1e-5) -> None:
    """``out``: a :class:`~stem_jax.trace.tracer.TraceOutput`; ``ref``: :func:`stem_jax.trace.reference.trace_reference`'s
    result for the plan traced in batch row ``row`` (``n_steps`` steps)."""
    for slot in range(n_steps + 1):
        live = np.asarray(out.nodes[row, slot]) >= 0
        assert np.asarray(out.nodes[row, slot])[live].tolist() == ref.nodes[slot], slot
        assert np.asarray(out.via[row, slot])[live].tolist() == ref.via[slot], slot
        assert np.asarray(out.parents[row, slot])[live].tolist() == ref.parents[slot], slot
        np.testing.assert_allclose(np.asarray(out.scores[row, slot])[live], ref.scores[slot], atol=atol)
    assert int(out.overflow[row]) == ref.overflow


def random_triples(rng: np.random.Generator, n_nodes: int, n_relations: int, draws: int, inverse: float,
                   ) -> list[tuple[str, str, str]]:
    """``draws`` random triples over entities ``e0..`` (30% from the hub ``e0``), each followed with probability
    ``inverse`` by its paired inverse triple (relation ``r<k>_inverse``)."""
    triples = []
    for _ in range(draws):
        h, t, r = int(rng.integers(0, n_nodes)), int(rng.integers(0, n_nodes)), int(rng.integers(0, n_relations))
        h = 0 if rng.random() < 0.3 else h  # a hub
        triples.append((f"e{h}", f"r{r}", f"e{t}"))
        if rng.random() < inverse:
            triples.append((f"e{t}", f"r{r}_inverse", f"e{h}"))
    return triples


def filled_to(triples: list[tuple[str, str, str]], size: int, n_nodes: int, relation: str) -> list[tuple[str, str, str]]:
    """``triples`` without repeats, cut or topped up to ``size`` with triples of ``relation`` over ``e0..``: a fixed
    size, so every example of a property shares one compiled tracer shape."""
    triples = list(dict.fromkeys(triples))[:size]
    for k in range(n_nodes * n_nodes):  # every (head, tail) pair once, if need be
        if len(triples) == size:
            break
        triples = list(dict.fromkeys(triples + [(f"e{k % n_nodes}", relation, f"e{(k * 5 + 1 + k // n_nodes) % n_nodes}")]))
    assert len(triples) == size, f"{len(triples)} distinct triples, not {size}"
    return triples
