"""Deterministic question samples for experiments on a part of a split."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stem_jax.data.types import Question


def sample_per_hop(questions: Sequence[Question], per_hop: int | None, seed: int) -> list[Question]:
    """A seeded uniform sample of ``per_hop`` questions per hop count, in file order (all without ``per_hop``).

    MetaQA files are grouped by question type (the first 1000 1-hop test questions are all actor/director
    -> movie), so the first N questions are no sample; this is."""
    if not per_hop:
        return list(questions)
    rng = np.random.default_rng(seed)
    chosen: list[int] = []
    for hop in sorted({q.hops for q in questions}, key=lambda h: (h is None, h or 0)):
        pool = [i for i, q in enumerate(questions) if q.hops == hop]
        chosen += rng.choice(pool, size=min(per_hop, len(pool)), replace=False).tolist()
    return [questions[i] for i in sorted(chosen)]
