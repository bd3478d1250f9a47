"""Resumable TensorStore cache of Triple-GNN outputs: per row, the top-K entities and probabilities.

Layout of a cache folder::

    <path>/ids.zarr     int32 [n, K]   KG entity ids, best first, -1 padded
    <path>/probs.zarr   float32 [n, K] their probabilities (0 where the id is -1)
    <path>/manifest.json              inputs fingerprint and per-chunk sha256

A row is one (question, schema graph) query. The folder is a :class:`~stem_jax.zarr_table.ZarrTable`:
rows are computed and written a chunk at a time; after each chunk the manifest is rewritten
atomically, so a killed run resumes at the first unfinished chunk, and a finished cache is read
without building a single subgraph. On open, every finished chunk is checked against its sha256
and recomputed (with a warning) if corrupt.

Several processes may open one cache at once (two ``stem-jax eval --guidance gnn`` sharing a cache
folder): a complete cache is read without any lock or write (a read-only cache folder works); computing,
resuming or repairing one holds its build lock (``<path>/.lock``, :func:`stem_jax.locks.build_lock`), so a
second process waits (one line on stderr naming the holder's pid), then reads the finished table, or
resumes it from the written chunks when the holder was killed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.errors import CacheError
from stem_jax.locks import build_lock
from stem_jax.progress import progress
from stem_jax.zarr_table import Column, TableKind, ZarrTable, json_sha256

FORMAT_VERSION = 1


class GuidanceCacheWarning(UserWarning):
    """A cached chunk failed its checksum and is being recomputed."""


KIND = TableKind(name="GNN guidance cache", warning=GuidanceCacheWarning, fix="delete {path}")


@dataclasses.dataclass
class GuidanceTable:
    ids: np.ndarray  # int32 [n, K]
    probs: np.ndarray  # float32 [n, K]
    path: Path
    computed_rows: int = 0  # rows computed in this call (0 when everything was cached)
    seconds: float = 0.0


def fingerprint(obj: Any) -> str:
    """sha256 of a JSON-able object (sorted keys)."""
    return json_sha256(obj)


def _columns(k: int) -> list[Column]:
    return [Column("ids", "int32", (k,), fill=-1), Column("probs", "float32", (k,), fill=0.0)]


def open_or_compute(
    path: Path,
    keys: Sequence[str],
    k: int,
    compute: Callable[[Sequence[int]], tuple[np.ndarray, np.ndarray]],
    *,
    inputs: dict[str, Any],
    chunk_rows: int = 1024,
    show_progress: bool = True,
    desc: str = "gnn guidance",
) -> GuidanceTable:
    """The cached top-``k`` table of ``keys`` under ``path``, computing only missing chunks.

    ``compute(rows)`` returns (ids int32 [len(rows), k], probs float32 [len(rows), k]) for row
    indices ``rows``. ``inputs`` (model fingerprint, KG, subgraph settings, ...) and the keys are
    fingerprinted into the manifest: a folder built from other inputs raises :class:`CacheError`.

    A complete cache is read without a lock and without writing; anything else is done holding the
    cache's build lock, waiting for another process that holds it (see the module docstring). An
    unwritable folder raises the ``OSError`` then.
    """
    path = Path(path)
    n = len(keys)
    columns = _columns(k)
    expected = {"format_version": FORMAT_VERSION, "n": n, "k": k, "chunk_rows": chunk_rows,
                "keys_sha256": fingerprint(list(keys)), "inputs_sha256": fingerprint(inputs)}
    ids = np.full((n, k), -1, np.int32)
    probs = np.zeros((n, k), np.float32)
    table = ZarrTable.open_complete(path, columns, expected, kind=KIND)
    if table is not None and not table.verify(into={"ids": ids, "probs": probs}, repair=False):
        return GuidanceTable(ids=ids, probs=probs, path=path)
    ZarrTable.refuse_foreign(path, columns, KIND)  # before build_lock writes its file
    with build_lock(path, KIND.name):
        # reread under the lock: another process may have finished the table (nothing to compute),
        # or been killed part way (its written chunks are kept)
        table = ZarrTable.open_or_create(path, columns, expected, kind=KIND, fresh={"inputs": inputs})
        return _compute_missing(table, compute, ids, probs, show_progress, desc)


def _compute_missing(table: ZarrTable, compute: Callable[[Sequence[int]], tuple[np.ndarray, np.ndarray]],
                     ids: np.ndarray, probs: np.ndarray, show_progress: bool, desc: str) -> GuidanceTable:
    """Verify ``table``'s chunks into ``ids``/``probs`` and compute the missing ones; holding its build lock."""
    n, k = ids.shape
    table.verify(into={"ids": ids, "probs": probs})
    todo = table.todo()
    began, computed = time.perf_counter(), 0
    if todo:
        finished = n - sum(hi - lo for lo, hi in map(table.bounds, todo))
        with progress(n, desc, "q", enabled=show_progress, initial=finished) as bar:
            for i in todo:
                lo, hi = table.bounds(i)
                block_ids, block_probs = compute(range(lo, hi))
                block_ids = np.asarray(block_ids, np.int32)
                block_probs = np.asarray(block_probs, np.float32)
                if block_ids.shape != (hi - lo, k) or block_probs.shape != (hi - lo, k):
                    raise CacheError(f"guidance compute returned {block_ids.shape}/{block_probs.shape}, "
                                     f"expected {(hi - lo, k)}")
                table.write_chunk(i, {"ids": block_ids, "probs": block_probs})
                ids[lo:hi], probs[lo:hi] = block_ids, block_probs
                computed += hi - lo
                bar.update(hi - lo)
    return GuidanceTable(ids=ids, probs=probs, path=table.path, computed_rows=computed,
                         seconds=time.perf_counter() - began if computed else 0.0)
