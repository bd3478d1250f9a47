"""The one train/validation split of a question set: by sha256 of the question id.

Every learned part (the pattern and LLM planners' few-shot pool, the Triple-GNN, SCR) holds out
its validation questions with :func:`hash_split`, so a question's side never depends on the order
of the file, on Python's salted ``hash`` or on a random seed.

Two bucketings exist, because checkpoints were trained with both and must stay valid:

* ``"fraction"`` (planners, SCR): the first four digest bytes, little-endian, over ``2**32``.
* ``"percent"`` (Triple-GNN, ``train-gnn --val-percent``): the first four digest bytes,
  big-endian (the first 8 hex digits), modulo 100, over 100.

A question is in validation when its bucket is below ``val_fraction``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal

from stem_jax.data.types import Question

Bucketing = Literal["fraction", "percent"]
BUCKETINGS: tuple[str, ...] = ("fraction", "percent")


def qid_bucket(qid: str, bucketing: Bucketing = "fraction") -> float:
    """A stable number in [0, 1) for a question id (see the module docstring for the two bucketings)."""
    head = hashlib.sha256(qid.encode("utf-8")).digest()[:4]
    if bucketing == "fraction":
        return int.from_bytes(head, "little") / 2**32
    if bucketing == "percent":
        return (int.from_bytes(head, "big") % 100) / 100  # exact: b / 100 < p / 100 iff b < p for integers
    raise ValueError(f"unknown bucketing {bucketing!r}; choose one of {', '.join(BUCKETINGS)}")


def hash_split(questions: Sequence[Question], val_fraction: float = 0.1, *,
               bucketing: Bucketing = "fraction") -> tuple[list[Question], list[Question]]:
    """(train, validation) in input order: a question is held out when its id's bucket is below ``val_fraction``.

    Deterministic across runs and machines, and independent of the order of ``questions``.
    """
    train, val = [], []
    for q in questions:
        (val if qid_bucket(q.qid, bucketing) < val_fraction else train).append(q)
    return train, val
