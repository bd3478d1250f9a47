"""Resumable on-disk embedding tables: TensorStore zarr3, float16, zstd, one manifest.

Layout of a cache folder::

    <path>/zarr.json, <path>/c/<i>/0   the zarr3 array [n, dim] float16, chunks [chunk_rows, dim]
    <path>/manifest.json              what was encoded, by which encoder, and per-chunk sha256

One :class:`~stem_jax.zarr_table.ZarrTable` with a single column written into the folder itself.
Chunks are encoded and written one at a time; after each, the manifest is rewritten atomically
(temp file + ``os.replace``), so a killed build resumes from the last finished chunk. On every
open all finished chunks are read back and checked against their sha256: a corrupt or missing
chunk is reported by index with a warning and recomputed (recomputing is cheap and keeps long
pipelines running; the warning keeps it from being silent).

Several processes may open one cache at once (two ``stem-jax eval`` sharing ``STEM_CACHE_DIR``): a
complete cache is read without any lock or write (a read-only cache folder works); building, resuming
or repairing one holds its build lock (``<path>/.lock``, :func:`stem_jax.locks.build_lock`), so a second
builder waits (one line on stderr naming the holder's pid), then reads the finished table, or resumes
it from the written chunks when the holder was killed.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from stem_jax.array_fields import axis_length
from stem_jax.encoder.base import TextEncoder
from stem_jax.errors import CacheError
from stem_jax.locks import build_lock
from stem_jax.zarr_table import Column, TableKind, ZarrTable, strings_sha256

FORMAT_VERSION = 1


class CacheWarning(UserWarning):
    """A cache chunk failed its checksum (or could not be read) and is being recomputed."""


@dataclasses.dataclass
class EmbeddingTable:
    """An embedding table read fully into memory, plus statistics of the build that made it."""

    array: np.ndarray  # float16 [n, dim], unit-norm rows (up to float16 rounding)
    path: Path
    encoder_name: str
    build_seconds: float = 0.0  # time spent encoding and writing in this call (0 when cached)
    encoded_rows: int = 0  # rows encoded in this call (0 when the cache was complete)
    recomputed_chunks: list[int] = dataclasses.field(default_factory=list)  # failed verification

    n = axis_length("array", 0, "Rows: one per text, in the order the texts were given.")
    dim = axis_length("array", 1, "The encoder's vector width.")

    @property
    def strings_per_second(self) -> float:
        """Encoding throughput of the last build (0 when nothing was encoded)."""
        return self.encoded_rows / self.build_seconds if self.build_seconds > 0 else 0.0


def texts_fingerprint(texts: Sequence[str]) -> str:
    """sha256 over the strings, length-prefixed so that ["ab", "c"] and ["a", "bc"] differ."""
    return strings_sha256(texts, counted=True)


def keyed_cache_path(folder: Path, stem: str, texts: Sequence[str], encoder: TextEncoder) -> Path:
    """``<folder>/<stem>-<16 hex>.zarr``, the hex from the encoder's name and the strings: the tables of the
    same strings by two encoders (another model, or another ``max_length``) sit side by side instead of the
    second refusing the first's (``open_or_build`` raises on an encoder mismatch)."""
    digest = strings_sha256([encoder.name, texts_fingerprint(texts)], counted=True)
    return Path(folder) / f"{stem}-{digest[:16]}.zarr"


def encode_exact(encoder: TextEncoder, texts: Sequence[str]) -> np.ndarray:
    """``encoder``'s vectors as a cache stores them: its ``encode_exact`` when it has one (an encoder whose
    online calls run faster, inexact matmuls), else ``encode``."""
    exact = getattr(encoder, "encode_exact", None)
    return exact(texts) if exact is not None else encoder.encode(texts)


KIND = TableKind(
    name="embedding cache",
    warning=CacheWarning,
    fix="delete the folder {path} or pass --rebuild (open_or_build(..., rebuild=True))",
    labels={
        "format_version": "cache format version",
        "encoder": "encoder",
        "dim": "embedding dim",
        "n": "number of strings",
        "chunk_rows": "chunk_rows",
        "texts_sha256": "strings (sha256 fingerprint)",
    },
)


def _column(dim: int) -> Column:
    return Column("embeddings", "float16", (dim,), fill=0.0, folder="")  # the array is the folder itself


def open_or_build(
    path: Path,
    texts: Sequence[str],
    encoder: TextEncoder,
    chunk_rows: int,
    progress: bool = True,
    desc: str = "",
    rebuild: bool = False,
) -> EmbeddingTable:
    """Return the embeddings of ``texts`` under ``path``, encoding only what is missing or corrupt.

    A complete, matching cache is read without calling the encoder. A partial one (killed build,
    at any point: before its manifest, before its first chunk, mid-chunk) is finished chunk by
    chunk. A cache built for another encoder, dim, chunk size or other strings raises
    :class:`CacheError` saying what differs; ``rebuild=True`` deletes it first. Chunks failing
    their checksum, an unreadable manifest or array metadata are recomputed with a
    :class:`CacheWarning`. A folder holding files that are not this cache's is never touched.

    A complete cache is read without a lock and without writing; anything else is done holding the
    cache's build lock, waiting for another process that holds it (see the module docstring). An
    unwritable folder raises the ``OSError`` then (callers with a cheap fallback catch it).
    """
    path = Path(path)
    n, dim = len(texts), int(encoder.dim)
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
    if n == 0:  # nothing to encode or store: leave no half-made folder behind
        if rebuild and path.exists():
            shutil.rmtree(path)
        return EmbeddingTable(array=np.zeros((0, dim), np.float16), path=path, encoder_name=encoder.name)
    expected = {
        "format_version": FORMAT_VERSION,
        "encoder": encoder.name,
        "dim": dim,
        "n": n,
        "chunk_rows": chunk_rows,
        "texts_sha256": texts_fingerprint(texts),
    }
    out = np.zeros((n, dim), np.float16)
    if not rebuild:
        table = ZarrTable.open_complete(path, [_column(dim)], expected, kind=KIND)
        if table is not None and not table.verify(into={"embeddings": out}, repair=False):
            return EmbeddingTable(array=out, path=path, encoder_name=encoder.name)
    ZarrTable.refuse_foreign(path, [_column(dim)], KIND, rebuild=rebuild)  # before build_lock writes its file
    with build_lock(path, KIND.name):
        return _build(path, texts, encoder, expected, out, progress, desc, rebuild)


def _build(path: Path, texts: Sequence[str], encoder: TextEncoder, expected: dict, out: np.ndarray, progress: bool,
           desc: str, rebuild: bool) -> EmbeddingTable:
    """Open (or start, or start over) the table and encode its missing chunks; holding its build lock."""
    n, dim = out.shape
    table = ZarrTable.open_or_create(path, [_column(dim)], expected, kind=KIND, fresh={"dtype": "float16"},
                                     rebuild=rebuild)
    recomputed = table.verify(into={"embeddings": out})

    todo = table.todo()
    encoded, start = 0, time.perf_counter()
    if todo:
        finished_rows = n - sum(hi - lo for lo, hi in map(table.bounds, todo))
        with tqdm(
            total=n,
            initial=finished_rows,
            desc=desc or path.name,
            unit="str",
            unit_scale=True,
            disable=not progress,
        ) as bar:
            for i in todo:
                lo, hi = table.bounds(i)
                vectors = np.asarray(encode_exact(encoder, texts[lo:hi]), dtype=np.float32)
                if vectors.shape != (hi - lo, dim):
                    raise CacheError(
                        f"encoder {encoder.name} returned shape {vectors.shape}, expected {(hi - lo, dim)}"
                    )
                # Re-normalise in float32 so the table is unit-norm whatever the encoder did.
                vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
                block = vectors.astype(np.float16)
                table.write_chunk(i, {"embeddings": block})
                out[lo:hi] = block
                encoded += hi - lo
                bar.update(hi - lo)
    return EmbeddingTable(
        array=out,
        path=path,
        encoder_name=encoder.name,
        build_seconds=time.perf_counter() - start if encoded else 0.0,
        encoded_rows=encoded,
        recomputed_chunks=recomputed,
    )
