"""Deterministic question samples: N questions of each hop count (or of each group a caller names).

One sampler, several selection rules, because callers sample for different reasons and must keep the
questions their earlier results were computed on:

* ``seeded``: a seeded uniform sample. MetaQA files are grouped by question type (the first 1000 1-hop test
  questions are all actor/director -> movie), so the first N questions are no sample; this is.
* ``first``: the first N (a quick run over the start of a split: ``DatasetSpec.limit``).
* ``lowest_hash``: the N with the lowest sha256(qid) (:func:`qid_rank`): independent of file order and of
  the other groups, and each N's sample holds every smaller N's, so runs over growing samples resume.
* ``stride``: every (len // N)-th question from the first, the first N of those.
* ``spread``: the questions at positions k * len // N for k < N, evenly over the group.

Whatever the rule, the sample keeps the order the questions came in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Literal, TypeVar

import numpy as np

T = TypeVar("T")
Rule = Literal["seeded", "first", "lowest_hash", "stride", "spread"]
RULES: tuple[str, ...] = ("seeded", "first", "lowest_hash", "stride", "spread")


def qid_rank(question: Any) -> str:
    """The key ``lowest_hash`` orders a group by: sha256 of the question id, hex."""
    return hashlib.sha256(question.qid.encode()).hexdigest()


def hop_count(question: Any) -> Hashable:
    return question.hops


def sample_per_hop(questions: Sequence[T], per_hop: int | None, seed: int = 0, *, rule: Rule = "seeded",
                   group: Callable[[T], Hashable] = hop_count) -> list[T]:
    """``per_hop`` questions of each group (by default each hop count) chosen by ``rule``, in input order.

    ``per_hop=None`` keeps every question; a group smaller than ``per_hop`` is kept whole. ``seed`` is read
    by the ``seeded`` rule only, which draws the groups in order of their key (None last)."""
    if rule not in RULES:
        raise ValueError(f"unknown sampling rule {rule!r}: one of {', '.join(RULES)}")
    if per_hop is None:
        return list(questions)
    groups: dict[Hashable, list[int]] = {}
    for i, question in enumerate(questions):
        groups.setdefault(group(question), []).append(i)
    rng = np.random.default_rng(seed)
    chosen: list[int] = []
    for key in sorted(groups, key=lambda g: (g is None, 0 if g is None else g)):
        pool = groups[key]
        n = min(per_hop, len(pool))
        if n <= 0:
            continue
        if rule == "seeded":
            chosen += rng.choice(pool, size=n, replace=False).tolist()
        elif rule == "first":
            chosen += pool[:n]
        elif rule == "lowest_hash":
            chosen += sorted(pool, key=lambda i: qid_rank(questions[i]))[:n]
        elif rule == "stride":
            chosen += pool[:: max(1, len(pool) // per_hop)][:n]
        else:  # spread
            chosen += [pool[(k * len(pool)) // n] for k in range(n)]
    return [questions[i] for i in sorted(chosen)]
