"""Answer names as the metrics compare them, and gold answers as KG entity ids.

The normalisation follows RoG's ``normalize`` (lower-case, no ASCII punctuation, no articles, collapsed
whitespace); :mod:`stem_jax.eval.metrics` scores with it, and planners and scorers that learn from answers
match gold answers to KG entities with the same rule, so a name the metrics accept is the entity they learn.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Sequence

from stem_jax.data.types import Question

_DELETE_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLE_WORDS = re.compile(r"\b(?:a|an|the)\b")


@functools.lru_cache(maxsize=1 << 16)  # pairwise matching normalises each name once per pair: ~35 calls a question
def rog_normalize(text: str) -> str:
    """Normalise ``text`` the way RoG's ``normalize`` does (see the module docstring).

    Lower-case, delete ASCII punctuation, replace the words a/an/the by spaces, collapse
    whitespace. RoG's ``<pad>`` removal never fires, so ``"<pad>"`` becomes ``"pad"`` here too.
    """
    text = text.lower().translate(_DELETE_PUNCTUATION)
    text = _ARTICLE_WORDS.sub(" ", text)
    return " ".join(text.split())


@functools.lru_cache(maxsize=1 << 16)  # every question's answers and predictions: names repeat across a split
def normalize_entity(name: str) -> str:
    """Normalise an entity name for exact comparison in :func:`strict_metrics`.

    Uses :func:`rog_normalize`. When that leaves nothing (names made only of articles or
    punctuation, e.g. the answer ``"A"`` or ``"The"``), falls back to the same steps without the
    article removal (``"A."`` -> ``"a"``), and if that is empty too (``"?"``), to the
    lower-cased, whitespace-collapsed name, so such answers stay distinct instead of all
    becoming ``""``. Only an all-whitespace name normalises to ``""``.
    """
    normalised = rog_normalize(name)
    if normalised:
        return normalised
    lowered = name.lower()
    without_punctuation = " ".join(lowered.translate(_DELETE_PUNCTUATION).split())
    if without_punctuation:
        return without_punctuation
    return " ".join(lowered.split())


def gold_entities(questions: Sequence[Question], entities: Sequence[str], names: dict[str, str] | None
                  ) -> list[set[int]]:
    """Each question's gold answers as KG entity ids (by id, else by normalised display name)."""
    names = names or {}
    by_name: dict[str, set[int]] = {}
    for i, entity in enumerate(entities):
        by_name.setdefault(normalize_entity(names.get(entity, entity)), set()).add(i)
    ids = {e: i for i, e in enumerate(entities)}
    out = []
    for q in questions:
        found: set[int] = set()
        for answer in q.answers:
            if answer in ids:
                found.add(ids[answer])
            else:
                found |= by_name.get(normalize_entity(answer), set())
        out.append(found)
    return out
