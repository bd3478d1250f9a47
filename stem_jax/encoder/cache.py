"""Resumable on-disk embedding tables: TensorStore zarr3, float16, zstd, one manifest.

Layout of a cache folder::

    <path>/zarr.json, <path>/c/<i>/0   the zarr3 array [n, dim] float16, chunks [chunk_rows, dim]
    <path>/manifest.json              what was encoded, by which encoder, and per-chunk sha256

Chunks are encoded and written one at a time; after each, the manifest is rewritten atomically
(temp file + ``os.replace``), so a killed build resumes from the last finished chunk. On every
open all finished chunks are read back and checked against their sha256: a corrupt or missing
chunk is reported by index with a warning and recomputed (recomputing is cheap and keeps long
pipelines running; the warning keeps it from being silent).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorstore as ts
from tqdm.auto import tqdm

from stem_jax.atomic import write_json_atomic
from stem_jax.encoder.base import TextEncoder
from stem_jax.errors import CacheError

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
_FIX = "delete the folder {path} or pass --rebuild (open_or_build(..., rebuild=True))"


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

    @property
    def n(self) -> int:
        return int(self.array.shape[0])

    @property
    def dim(self) -> int:
        return int(self.array.shape[1])

    @property
    def strings_per_second(self) -> float:
        """Encoding throughput of the last build (0 when nothing was encoded)."""
        return self.encoded_rows / self.build_seconds if self.build_seconds > 0 else 0.0


def texts_fingerprint(texts: Sequence[str]) -> str:
    """sha256 over the strings, length-prefixed so that ["ab", "c"] and ["a", "bc"] differ."""
    digest = hashlib.sha256()
    digest.update(len(texts).to_bytes(8, "little"))
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _chunk_sha(block: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(block, dtype="<f2").tobytes()).hexdigest()


def _write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    write_json_atomic(path / MANIFEST, manifest)


def _spec(path: Path, n: int, dim: int, chunk_rows: int) -> dict[str, Any]:
    return {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "metadata": {
            "shape": [n, dim],
            "data_type": "float16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk_rows, dim]}},
            "codecs": [
                {"name": "bytes", "configuration": {"endian": "little"}},
                {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
            ],
            "fill_value": 0.0,
        },
    }


def _check_manifest(path: Path, found: dict[str, Any], expected: dict[str, Any]) -> None:
    labels = {
        "format_version": "cache format version",
        "encoder": "encoder",
        "dim": "embedding dim",
        "n": "number of strings",
        "chunk_rows": "chunk_rows",
        "texts_sha256": "strings (sha256 fingerprint)",
    }
    diffs = [
        f"{labels[k]}: cache has {found.get(k)!r}, this run has {expected[k]!r}"
        for k in labels
        if found.get(k) != expected[k]
    ]
    if diffs:
        raise CacheError(
            f"{path}: embedding cache was built for different inputs\n  "
            + "\n  ".join(diffs)
            + "\n  how to fix: "
            + _FIX.format(path=path)
        )


_OWN_ENTRIES = ("zarr.json", "c")  # what the zarr3 array puts in the folder besides the manifest


def _own_files_only(path: Path, *, manifest: bool = False) -> bool:
    """True when ``path`` holds nothing but this cache's own files (the array, manifest temp files and,
    with ``manifest``, the manifest itself): safe to clear when the build must start over."""
    own = _OWN_ENTRIES + ((MANIFEST,) if manifest else ())
    return all(
        entry.name in own
        or entry.name.endswith(".__lock")  # TensorStore's file driver writes through <key>.__lock
        or (entry.name.startswith(f".{MANIFEST}-") and entry.name.endswith(".tmp"))
        for entry in path.iterdir()
    )


def _clear_own_files(path: Path) -> None:
    for entry in path.iterdir():
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _create_array(path: Path, n: int, dim: int, chunk_rows: int, manifest: dict[str, Any]):
    """A fresh array, then the manifest: ``delete_existing`` clears the whole folder, manifest included."""
    store = ts.open(_spec(path, n, dim, chunk_rows), create=True, delete_existing=True).result()
    manifest["chunks"] = {}
    _write_manifest(path, manifest)
    return store


def _chunk_file(path: Path, i: int) -> Path:
    return path / "c" / str(i) / "0"  # zarr3 default chunk key encoding; the dim axis is one chunk


def _start_over(path: Path, reason: str) -> None:
    warnings.warn(f"{path}: {reason}; building this cache again", CacheWarning, stacklevel=3)
    _clear_own_files(path)


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
    """
    path = Path(path)
    n, dim = len(texts), int(encoder.dim)
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
    if rebuild and path.exists():
        shutil.rmtree(path)
    if n == 0:  # nothing to encode or store: leave no half-made folder behind
        return EmbeddingTable(array=np.zeros((0, dim), np.float16), path=path, encoder_name=encoder.name)
    if path.exists() and not path.is_dir():
        raise CacheError(f"{path}: is a file, not an embedding cache folder\n  how to fix: delete or move it")
    expected = {
        "format_version": FORMAT_VERSION,
        "encoder": encoder.name,
        "dim": dim,
        "n": n,
        "chunk_rows": chunk_rows,
        "texts_sha256": texts_fingerprint(texts),
    }
    manifest_path = path / MANIFEST
    manifest: dict[str, Any] | None = None
    if manifest_path.exists():
        try:
            manifest = json.loads(manifest_path.read_text())
            if not isinstance(manifest, dict) or not isinstance(manifest.get("chunks"), dict):
                raise ValueError("not a cache manifest")
        except (OSError, ValueError) as e:
            if not _own_files_only(path, manifest=True):
                raise CacheError(
                    f"{manifest_path}: unreadable manifest ({e})\n  how to fix: {_FIX.format(path=path)}"
                ) from None
            _start_over(path, f"unreadable manifest ({e})")
            manifest = None
    if manifest is not None:
        _check_manifest(path, manifest, expected)
        try:
            # create=True too: a build killed right after its first manifest has no array yet.
            store = ts.open(_spec(path, n, dim, chunk_rows), open=True, create=True).result()
        except ValueError as e:
            warnings.warn(f"{path}: unreadable array metadata ({e}); building this cache again", CacheWarning,
                          stacklevel=2)
            store = _create_array(path, n, dim, chunk_rows, manifest)
    else:
        if path.exists() and any(path.iterdir()):
            if not _own_files_only(path):
                raise CacheError(
                    f"{path}: folder exists but is not an embedding cache (no {MANIFEST})\n"
                    f"  how to fix: {_FIX.format(path=path)}"
                )
            _start_over(path, f"a build was killed before its first {MANIFEST}")
        path.mkdir(parents=True, exist_ok=True)
        manifest = {**expected, "dtype": "float16", "chunks": {}}
        store = _create_array(path, n, dim, chunk_rows, manifest)

    out = np.zeros((n, dim), np.float16)
    n_chunks = -(-n // chunk_rows)
    done: dict[str, str] = manifest["chunks"]
    recomputed = []
    for key in sorted(done, key=int):
        i = int(key)
        lo, hi = i * chunk_rows, min(n, (i + 1) * chunk_rows)
        try:
            block = np.asarray(store[lo:hi].read().result())
            ok = _chunk_sha(block) == done[key]
        except ValueError as e:  # TensorStore reports undecodable chunk files as ValueError
            block, ok = None, False
            reason = str(e)
        else:
            reason = "checksum mismatch"
        if ok:
            out[lo:hi] = block
        else:
            warnings.warn(
                f"{path}: chunk {i} (rows {lo}-{hi - 1}) is corrupt ({reason}); recomputing it",
                CacheWarning,
                stacklevel=2,
            )
            del done[key]
            recomputed.append(i)
    if recomputed:
        _write_manifest(path, manifest)

    todo = [i for i in range(n_chunks) if str(i) not in done]
    encoded, start = 0, time.perf_counter()
    if todo:
        finished_rows = n - sum(min(n, (i + 1) * chunk_rows) - i * chunk_rows for i in todo)
        with tqdm(
            total=n,
            initial=finished_rows,
            desc=desc or path.name,
            unit="str",
            unit_scale=True,
            disable=not progress,
        ) as bar:
            for i in todo:
                lo, hi = i * chunk_rows, min(n, (i + 1) * chunk_rows)
                vectors = np.asarray(encoder.encode(texts[lo:hi]), dtype=np.float32)
                if vectors.shape != (hi - lo, dim):
                    raise CacheError(
                        f"encoder {encoder.name} returned shape {vectors.shape}, expected {(hi - lo, dim)}"
                    )
                # Re-normalise in float32 so the table is unit-norm whatever the encoder did.
                vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
                block = vectors.astype(np.float16)
                # A corrupt or half-written chunk file would be read back to merge a partial (last) chunk.
                _chunk_file(path, i).unlink(missing_ok=True)
                store[lo:hi].write(block).result()
                done[str(i)] = _chunk_sha(block)
                _write_manifest(path, manifest)
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
