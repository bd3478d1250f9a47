"""Entity, relation and serialized-triple embeddings of a KG, cached in TensorStore."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np

from stem_jax.encoder.base import TextEncoder
from stem_jax.encoder.cache import EmbeddingTable, open_or_build, texts_fingerprint
from stem_jax.encoder.compact import CompactRows, open_or_build_compact
from stem_jax.kg.index import KGIndex, relation_text, serialize_triple
from stem_jax.zarr_table import MANIFEST


@dataclasses.dataclass(frozen=True)
class KGEmbeddings:
    entities: EmbeddingTable
    relations: EmbeddingTable
    triples: EmbeddingTable
    # The triple rows the tracer reads, in a compact format (encoder.row_format); None: the float16 table
    triple_rows: CompactRows | None = None

    def tables(self) -> dict[str, EmbeddingTable]:
        return {"entities": self.entities, "relations": self.relations, "triples": self.triples}

    @property
    def row_format(self) -> str:
        return self.triple_rows.format if self.triple_rows is not None else "float16"

    def trace_rows(self) -> np.ndarray | CompactRows:
        """What the tracer's KG arrays hold (:meth:`~stem_jax.trace.tracer.KGArrays.from_index`)."""
        return self.triple_rows if self.triple_rows is not None else self.triples.array


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


def names_key(index: KGIndex, names: dict[str, str] | None) -> str:
    """``""``, or ``-names-<sha>`` when ``names`` change what the encoder sees for some entity: the KG
    fingerprint covers the triples' ids, and two loads of one KG with other display names must not
    share rows."""
    if not names or all(names.get(e, e) == e for e in index.entities):
        return ""
    return "-names-" + texts_fingerprint([names.get(e, e) for e in index.entities])[:12]


def _slug(encoder: TextEncoder) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", encoder.name)[:64]


def cache_folder(cache_root: Path, dataset: str, index: KGIndex, encoder: TextEncoder,
                 names: dict[str, str] | None = None) -> Path:
    """``<root>/kg-<fingerprint>/<encoder>``: keyed by the KG's content and the encoder only, so the same
    KG loaded under another dataset name (``--dataset files`` over an exported demo or MetaQA) reuses
    its rows, and a new KG or encoder never does. ``names`` (entity id -> display name) add a key
    when they change the encoded texts.

    Caches built before this layout sit at ``<root>/<dataset>/kg-<fingerprint>/<encoder>``; when the
    new folder does not exist yet, such a folder is used in place (no copy, no re-encoding): this
    dataset's own first, else another dataset's whose stored strings are exactly this KG's texts.
    """
    root = Path(cache_root)
    key, slug = f"kg-{kg_fingerprint(index)}{names_key(index, names)}", _slug(encoder)
    folder = root / key / slug
    if folder.exists():
        return folder
    own = root / dataset / key / slug
    if own.is_dir():
        return own  # exactly where this dataset's cache has always been: open_or_build checks its strings
    others = sorted(p for p in root.glob(f"*/{key}/{slug}") if p.is_dir() and p != own)
    if others:
        texts = kg_texts(index, names)
        for legacy in others:
            if _holds(legacy, texts, encoder):
                return legacy
    return folder


def _holds(folder: Path, texts: dict[str, list[str]], encoder: TextEncoder) -> bool:
    """Whether every table manifest in ``folder`` was built by ``encoder`` for exactly ``texts``."""
    found = False
    for kind, strings in texts.items():
        manifest = folder / f"{kind}.zarr" / MANIFEST
        if not manifest.is_file():
            continue
        try:
            data = json.loads(manifest.read_bytes())
        except (OSError, ValueError):
            return False
        if not isinstance(data, dict) or data.get("encoder") != encoder.name or \
                data.get("texts_sha256") != texts_fingerprint(strings):
            return False
        found = True
    return found


def build_kg_embeddings(
    index: KGIndex,
    encoder: TextEncoder,
    folder: Path,
    *,
    chunk_rows: int,
    names: dict[str, str] | None = None,
    rebuild: bool = False,
    progress: bool = True,
    row_format: str = "float16",
) -> KGEmbeddings:
    """Open the three caches under ``folder``, encoding whatever is missing (resumable); with a compact
    ``row_format`` also the triple rows in that format, built from the float16 table once and cached beside it
    (:mod:`stem_jax.encoder.compact`)."""
    texts = kg_texts(index, names)
    tables = {
        kind: open_or_build(
            Path(folder) / f"{kind}.zarr", strings, encoder, chunk_rows,
            progress=progress, desc=f"encode {kind}", rebuild=rebuild,
        )
        for kind, strings in texts.items()
    }
    triple_rows = open_or_build_compact(tables["triples"], row_format, rebuild=rebuild)
    return KGEmbeddings(**tables, triple_rows=triple_rows)
