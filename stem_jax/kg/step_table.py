"""The KG's schema-step texts, encoded once per KG and read instead of running a forward online.

A plan's first step names the question's topic: ``Kismet directed by [ENT1]`` or ``[ENT1] written by Kismet``.
Those texts depend on the question only through the topic entity and the relation, so the set a KG can produce is
bounded by its (entity, relation) pairs. :func:`step_texts` lists both orientations of every pair that occurs in
the KG (an entity at either end of a triple of that relation): about 220,000 texts for MetaQA, 88% of the
entity-bearing step texts the pattern planner writes for fresh MetaQA 2-hop questions (the rest, and every
placeholder-only text, are encoded online as before).

The table is an ordinary embedding cache (:func:`~stem_jax.encoder.cache.open_or_build`: float32 forwards stored
as float16, resumable, keyed by the encoder and the texts) beside the KG's entity and triple tables, so its rows
are what every other cache of this encoder holds, whatever the online ``dot_dtype``; the step-text table of the
STEM pipeline rounds schema vectors to float16 too. :meth:`~stem_jax.encoder.minilm.MiniLMEncoder.encode` reads a
text found here instead of encoding it; question wordings are never in it, so they are always encoded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from stem_jax.encoder.base import TextEncoder
from stem_jax.encoder.cache import EmbeddingTable, keyed_cache_path, open_or_build
from stem_jax.kg.index import KGIndex, relation_text

PLACEHOLDER = "[ENT1]"  # the planners' name for the first node bound from the topic (plan/templates.py, oracle.py)


@dataclasses.dataclass
class StepTable:
    """Vectors of a fixed set of texts: ``rows`` maps a text to its row of ``table.array`` (float16)."""

    table: EmbeddingTable
    rows: dict[str, int]

    @classmethod
    def from_table(cls, table: EmbeddingTable, texts: Sequence[str]) -> StepTable:
        return cls(table, {text: i for i, text in enumerate(texts)})

    def __len__(self) -> int:
        return len(self.rows)

    def lookup(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(positions of ``texts`` found here, their vectors float32 [found, dim]), positions ascending."""
        found = [(i, row) for i, text in enumerate(texts) if (row := self.rows.get(text)) is not None]
        if not found:
            return np.zeros(0, np.int64), np.zeros((0, self.table.dim), np.float32)
        where, rows = (np.asarray(a, np.int64) for a in zip(*found, strict=True))
        return where, self.table.array[rows].astype(np.float32)


def step_pairs(index: KGIndex) -> np.ndarray:
    """int64 [p, 2]: distinct (entity, relation) pairs of the KG, an entity at either end of a triple of that
    relation; sorted by entity, then relation."""
    triples = np.asarray(index.triples, np.int64).reshape(-1, 3)
    pairs = np.concatenate([triples[:, [0, 1]], triples[:, [2, 1]]])
    return np.unique(pairs, axis=0) if len(pairs) else np.zeros((0, 2), np.int64)


def count_step_texts(index: KGIndex) -> int:
    """How many texts :func:`step_texts` lists at most (two per pair; fewer where names coincide)."""
    return 2 * len(step_pairs(index))


def step_texts(index: KGIndex, names: Mapping[str, str] | None = None) -> list[str]:
    """``<entity> <relation> [ENT1]`` and ``[ENT1] <relation> <entity>`` for every (entity, relation) pair of the
    KG, in the planners' text form (``SchemaTriple.text``: the entity's display name, :func:`relation_text`);
    distinct, in a deterministic order (by entity, relation, then orientation)."""
    display = [names.get(e, e) for e in index.entities] if names else list(index.entities)
    phrases = [relation_text(r) for r in index.relations]
    out: dict[str, None] = {}
    for entity, relation in step_pairs(index).tolist():
        name, phrase = display[entity], phrases[relation]
        out[f"{name} {phrase} {PLACEHOLDER}"] = None
        out[f"{PLACEHOLDER} {phrase} {name}"] = None
    return list(out)


def open_step_table(encoder: TextEncoder, index: KGIndex, folder: Path, *, chunk_rows: int, max_texts: int,
                    names: Mapping[str, str] | None = None, rebuild: bool = False, progress: bool = False,
                    ) -> StepTable | None:
    """The KG's step-text table under ``folder`` (the KG's embedding-cache folder), built once and then read;
    None when ``max_texts`` is 0 or the KG has more than ``max_texts`` such texts (a large KG: its step texts
    are encoded online)."""
    if max_texts <= 0 or count_step_texts(index) > max_texts:
        return None
    texts = step_texts(index, names)
    path = keyed_cache_path(folder, "step-texts", texts, encoder)
    table = open_or_build(path, texts, encoder, chunk_rows, progress=progress, desc="schema-step texts",
                          rebuild=rebuild)
    return StepTable.from_table(table, texts)
