"""The KG's placeholder-only schema-step texts, encoded once per KG and read instead of running a forward online.

A relation path planned from a topic (``Iceland -[location.country.languages_spoken]- [ENT1] -[...]- [ENT2]``)
writes its first step with the topic's name (those texts are in the KG's step table, :mod:`stem_jax.kg.step_table`)
and every later step between two placeholders, in the relation's orientation: ``[ENT1] location time zones [ENT2]``
or ``[ENT2] location time zones [ENT1]``. Such a text depends on the question only through the relation and the
placeholders' numbers, so a KG can produce few of them: :func:`relation_step_texts` lists, for every KG relation,
both orientations of each pair of consecutive placeholders up to ``[ENT{depth}]`` (``depth`` 3: four texts per
relation, about 4,200 for webqsp-r's 1,055 relations). A natural question's plan steps are mostly such texts, and
unlike templated questions each new question brings new ones, so reading them from a table takes the text encoder
out of a fresh question's schema encoding.

The table is an ordinary embedding cache (:func:`~stem_jax.encoder.cache.open_or_build`: float32 forwards stored
as float16, resumable, keyed by the encoder and the texts, so a new KG or encoder builds its own) beside the KG's
entity and triple tables: its rows are what the split-wide schema-text cache of ``stem-jax eval`` holds for the
same texts. It is not a memo: ``--no-encoder-memo`` (which makes every question wording encoded afresh) leaves it
on; ``encoder.step_table_max`` bounds it, as it bounds the step table (0: never built, every text encoded).
"""

from __future__ import annotations

import sys
from pathlib import Path

from stem_jax.encoder.base import TextEncoder
from stem_jax.encoder.cache import keyed_cache_path, open_or_build
from stem_jax.errors import UNWRITABLE
from stem_jax.kg.index import KGIndex, relation_text
from stem_jax.kg.step_table import StepTable

DEPTH = 3  # [ENT1]..[ENT3]: every step of a 2-hop chain, the middle step of a 3-hop one (few plans are longer)


def count_relation_step_texts(index: KGIndex, depth: int = DEPTH) -> int:
    """How many texts :func:`relation_step_texts` lists at most: two per relation and consecutive pair."""
    return 2 * max(depth - 1, 0) * len(index.relations)


def relation_step_texts(index: KGIndex, depth: int = DEPTH) -> list[str]:
    """``[ENTi] <relation> [ENTi+1]`` and ``[ENTi+1] <relation> [ENTi]`` for every KG relation and i < ``depth``,
    in the planners' text form (``SchemaTriple.text``, :func:`relation_text`); distinct (two relations with one
    phrase share their texts), in a deterministic order (by relation, then pair, then orientation)."""
    out: dict[str, None] = {}
    for relation in index.relations:
        phrase = relation_text(relation)
        for i in range(1, depth):
            out[f"[ENT{i}] {phrase} [ENT{i + 1}]"] = None
            out[f"[ENT{i + 1}] {phrase} [ENT{i}]"] = None
    return list(out)


def open_relation_step_table(encoder: TextEncoder, index: KGIndex, folder: Path, *, chunk_rows: int, max_texts: int,
                             depth: int = DEPTH, progress: bool = False) -> StepTable | None:
    """The KG's relation-step table under ``folder`` (the KG's embedding-cache folder), built once and then read;
    None when ``max_texts`` is 0, when the KG would have more than ``max_texts`` such texts, or when ``folder`` is
    read-only and the table is not built there (a warning says so; the texts are then encoded online)."""
    if max_texts <= 0 or count_relation_step_texts(index, depth) > max_texts or not index.relations:
        return None
    texts = relation_step_texts(index, depth)
    path = keyed_cache_path(folder, "relation-step-texts", texts, encoder)
    try:
        table = open_or_build(path, texts, encoder, chunk_rows, progress=progress, desc="relation-step texts")
    except OSError as err:
        if err.errno not in UNWRITABLE:
            raise
        print(f"warning: relation-step texts not cached under {folder} ({err.strerror}); they are encoded online",
              file=sys.stderr)
        return None
    return StepTable.from_table(table, texts)
