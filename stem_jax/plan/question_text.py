"""Question-text helpers shared by the planners: topic masking, display names, distinct texts, word dropout."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import numpy as np

from stem_jax.data.types import Question

MASK_TOKEN = "X"
_SPACES = re.compile(r"\s+")


@functools.lru_cache(maxsize=1 << 16)
def _mention_pattern(mention: str) -> re.Pattern[str]:
    # ``re``'s own cache holds 512 patterns: a split's topic names would recompile on every question
    return re.compile(re.escape(mention), re.IGNORECASE)


def mask_topics(text: str, mentions: Sequence[str], token: str = MASK_TOKEN) -> tuple[str, bool]:
    """Replace each mention of a question entity in ``text`` by ``token``.

    Matching is case-insensitive and longest mention first (so "The Matrix Reloaded" is masked
    before "The Matrix"). Returns the masked text and whether every mention was found; a
    mention that is absent (a paraphrase that abbreviates the name) leaves the text as is.
    """
    found_all = True
    for mention in sorted({m for m in mentions if m}, key=len, reverse=True):
        text, n = _mention_pattern(mention).subn(token, text)
        found_all &= n > 0
    return _SPACES.sub(" ", text).strip(), found_all


def topic_names(question: Question, names: dict[str, str] | None) -> list[str]:
    """The question's entities as the text names them (display names where ids are opaque)."""
    names = names or {}
    return [names.get(t, t) for t in question.topic_entities]


def unique_texts(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Distinct texts in first-seen order and, per input, the index of its distinct text."""
    first: dict[str, int] = {}
    inverse = np.asarray([first.setdefault(t, len(first)) for t in texts], np.int64)
    return list(first), inverse


def word_dropout(text: str, rng: np.random.Generator, rate: float, keep: str = MASK_TOKEN) -> str:
    """``text`` with each word dropped with probability ``rate``; the masked topic and two words always stay."""
    words = text.split()
    kept = [w for w in words if w == keep or rng.random() >= rate]
    if sum(w != keep for w in kept) < 2:
        return text
    return " ".join(kept)
