"""Entity, relation and serialized-triple embeddings of a KG, cached in TensorStore."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from stem_jax.encoder.base import TextEncoder
from stem_jax.encoder.cache import EmbeddingTable, open_or_build
from stem_jax.kg.index import KGIndex, relation_text, serialize_triple


@dataclasses.dataclass(frozen=True)
class KGEmbeddings:
    entities: EmbeddingTable
    relations: EmbeddingTable
    triples: EmbeddingTable

    def tables(self) -> dict[str, EmbeddingTable]:
        return {"entities": self.entities, "relations": self.relations, "triples": self.triples}


def kg_texts(index: KGIndex, names: dict[str, str] | None = None) -> dict[str, list[str]]:
    """The strings the encoder sees: entity names, relation phrases, serialized triples."""
    display = [names.get(e, e) for e in index.entities] if names else list(index.entities)
    return {
        "entities": display,
        "relations": [relation_text(r) for r in index.relations],
        "triples": [
            serialize_triple(display[h], index.relations[r], display[t]) for h, r, t in index.triples.tolist()
        ],
    }


def kg_fingerprint(index: KGIndex) -> str:
    """The KG's content fingerprint (:attr:`KGIndex.fingerprint`, computed once per index)."""
    return index.fingerprint


def cache_folder(cache_root: Path, dataset: str, index: KGIndex, encoder: TextEncoder) -> Path:
    """``<root>/<dataset>/kg-<fingerprint>/<encoder>``: a new KG or encoder never reuses old rows."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", encoder.name)[:64]
    return Path(cache_root) / dataset / f"kg-{kg_fingerprint(index)}" / slug


def build_kg_embeddings(
    index: KGIndex,
    encoder: TextEncoder,
    folder: Path,
    *,
    chunk_rows: int,
    names: dict[str, str] | None = None,
    rebuild: bool = False,
    progress: bool = True,
) -> KGEmbeddings:
    """Open the three caches under ``folder``, encoding whatever is missing (resumable)."""
    texts = kg_texts(index, names)
    tables = {
        kind: open_or_build(
            Path(folder) / f"{kind}.zarr", strings, encoder, chunk_rows,
            progress=progress, desc=f"encode {kind}", rebuild=rebuild,
        )
        for kind, strings in texts.items()
    }
    return KGEmbeddings(**tables)
