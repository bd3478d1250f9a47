"""Encoder features the Triple-GNN reads: [E_h; E_r; E_t] per schema triple, and relation rows.

A schema triple's head and tail are KG entity names (question entities), other constants, or
placeholders (``[ENT1]``); each is embedded with the project's text encoder (the paper's PEM,
appendix A eq. 18). Names that are KG entities reuse the KG's cached entity embeddings and KG
relations reuse the cached relation embeddings, so only placeholders and unknown strings are
encoded, once per process.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from stem_jax.encoder.base import TextEncoder
from stem_jax.kg.embeddings import KGEmbeddings
from stem_jax.kg.index import KGIndex, relation_text
from stem_jax.plan.schema import SchemaGraph


class SchemaFeaturizer:
    """Maps schema graphs to float32 [T, 3 d_pem] feature blocks (see the module docstring)."""

    def __init__(self, index: KGIndex, embeddings: KGEmbeddings, encoder: TextEncoder,
                 names: dict[str, str] | None = None):
        self.index = index
        self.encoder = encoder
        self.entity_emb = embeddings.entities.array
        self.relation_emb = embeddings.relations.array
        self.dim = int(self.entity_emb.shape[1])
        self.entity_rows: dict[str, int] = {}
        names = names or {}
        for i, entity in enumerate(index.entities):
            self.entity_rows.setdefault(names.get(entity, entity), i)
            self.entity_rows.setdefault(entity, i)
        self.encoded: dict[str, np.ndarray] = {}

    def relation_matrix(self) -> np.ndarray:
        """float32 [R, d_pem]: the KG relations' text embeddings, the model's relation input."""
        return np.asarray(self.relation_emb, np.float32)

    def _parts(self, schema: SchemaGraph) -> list[tuple[str, str]]:
        parts = []
        for t in schema.triples:
            parts += [("entity", t.head), ("relation", t.relation), ("entity", t.tail)]
        return parts

    def prepare(self, schemas: Iterable[SchemaGraph]) -> None:
        """Encode, in one encoder call, every string of ``schemas`` that has no cached row."""
        missing = set()
        for schema in schemas:
            for kind, text in self._parts(schema):
                if kind == "entity" and text not in self.entity_rows:
                    missing.add(text)
                elif kind == "relation" and text not in self.index.relation_ids:
                    missing.add(relation_text(text))
        missing -= self.encoded.keys()
        if missing:
            ordered = sorted(missing)
            vectors = np.asarray(self.encoder.encode(ordered), np.float32)
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            # float16 like the KG tables, so a name embeds the same whether cached or not
            self.encoded.update(zip(ordered, vectors.astype(np.float16), strict=True))

    def _vector(self, kind: str, text: str) -> np.ndarray:
        if kind == "entity":
            row = self.entity_rows.get(text)
            return self.entity_emb[row] if row is not None else self.encoded[text]
        rid = self.index.relation_ids.get(text)
        return self.relation_emb[rid] if rid is not None else self.encoded[relation_text(text)]

    def __call__(self, schema: SchemaGraph) -> np.ndarray:
        self.prepare([schema])
        flat = [self._vector(kind, text) for kind, text in self._parts(schema)]
        return np.asarray(flat, np.float32).reshape(len(schema.triples), 3 * self.dim)
