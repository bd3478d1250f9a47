"""Resumable TensorStore cache of Triple-GNN outputs: per row, the top-K entities and probabilities.

Layout of a cache folder::

    <path>/ids.zarr     int32 [n, K]   KG entity ids, best first, -1 padded
    <path>/probs.zarr   float32 [n, K] their probabilities (0 where the id is -1)
    <path>/manifest.json              inputs fingerprint and per-chunk sha256

A row is one (question, schema graph) query. Rows are computed and written a chunk at a time;
after each chunk the manifest is rewritten atomically, so a killed run resumes at the first
unfinished chunk, and a finished cache is read without building a single subgraph. On open,
every finished chunk is checked against its sha256 and recomputed (with a warning) if corrupt.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorstore as ts

from stem_jax.atomic import write_json_atomic
from stem_jax.errors import CacheError
from stem_jax.progress import progress

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


class GuidanceCacheWarning(UserWarning):
    """A cached chunk failed its checksum and is being recomputed."""


@dataclasses.dataclass
class GuidanceTable:
    ids: np.ndarray  # int32 [n, K]
    probs: np.ndarray  # float32 [n, K]
    path: Path
    computed_rows: int = 0  # rows computed in this call (0 when everything was cached)
    seconds: float = 0.0


def fingerprint(obj: Any) -> str:
    """sha256 of a JSON-able object (sorted keys)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def _spec(path: Path, dtype: str, n: int, k: int, chunk_rows: int, fill: Any) -> dict[str, Any]:
    return {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "metadata": {
            "shape": [n, k],
            "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk_rows, k]}},
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                       {"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
            "fill_value": fill,
        },
    }


def _write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    write_json_atomic(path / MANIFEST, manifest)


def _chunk_sha(ids: np.ndarray, probs: np.ndarray) -> str:
    digest = hashlib.sha256(np.ascontiguousarray(ids, "<i4").tobytes())
    digest.update(np.ascontiguousarray(probs, "<f4").tobytes())
    return digest.hexdigest()


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
    """
    path = Path(path)
    n = len(keys)
    expected = {"format_version": FORMAT_VERSION, "n": n, "k": k, "chunk_rows": chunk_rows,
                "keys_sha256": fingerprint(list(keys)), "inputs_sha256": fingerprint(inputs)}
    manifest_path = path / MANIFEST
    if manifest_path.exists():
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, ValueError) as e:
            raise CacheError(f"{manifest_path}: unreadable manifest ({e})\n  how to fix: delete {path}") from None
        diffs = [f"{name}: cache has {manifest.get(name)!r}, this run has {value!r}"
                 for name, value in expected.items() if manifest.get(name) != value]
        if diffs:
            raise CacheError(f"{path}: GNN guidance cache was built for other inputs\n  " + "\n  ".join(diffs)
                             + f"\n  how to fix: delete {path}")
    else:
        if path.exists() and any(path.iterdir()):
            raise CacheError(f"{path}: folder exists but is not a guidance cache (no {MANIFEST})\n"
                             f"  how to fix: delete {path}")
        path.mkdir(parents=True, exist_ok=True)
        manifest = {**expected, "inputs": inputs, "chunks": {}}
        _write_manifest(path, manifest)
    id_store = ts.open(_spec(path / "ids.zarr", "int32", n, k, chunk_rows, -1), open=True, create=True).result()
    prob_store = ts.open(_spec(path / "probs.zarr", "float32", n, k, chunk_rows, 0.0), open=True,
                         create=True).result()

    ids = np.full((n, k), -1, np.int32)
    probs = np.zeros((n, k), np.float32)
    done: dict[str, str] = manifest["chunks"]
    for key in sorted(done, key=int):
        lo, hi = int(key) * chunk_rows, min(n, (int(key) + 1) * chunk_rows)
        try:
            block_ids = np.asarray(id_store[lo:hi].read().result())
            block_probs = np.asarray(prob_store[lo:hi].read().result())
            ok = _chunk_sha(block_ids, block_probs) == done[key]
        except ValueError:
            ok = False
        if ok:
            ids[lo:hi], probs[lo:hi] = block_ids, block_probs
        else:
            warnings.warn(f"{path}: chunk {key} (rows {lo}-{hi - 1}) is corrupt; recomputing it",
                          GuidanceCacheWarning, stacklevel=2)
            del done[key]
    todo = [i for i in range(-(-n // chunk_rows)) if str(i) not in done]
    began, computed = time.perf_counter(), 0
    if todo:
        finished = n - sum(min(n, (i + 1) * chunk_rows) - i * chunk_rows for i in todo)
        with progress(n, desc, "q", enabled=show_progress, initial=finished) as bar:
            for i in todo:
                lo, hi = i * chunk_rows, min(n, (i + 1) * chunk_rows)
                block_ids, block_probs = compute(range(lo, hi))
                block_ids = np.asarray(block_ids, np.int32)
                block_probs = np.asarray(block_probs, np.float32)
                if block_ids.shape != (hi - lo, k) or block_probs.shape != (hi - lo, k):
                    raise CacheError(f"guidance compute returned {block_ids.shape}/{block_probs.shape}, "
                                     f"expected {(hi - lo, k)}")
                id_store[lo:hi].write(block_ids).result()
                prob_store[lo:hi].write(block_probs).result()
                done[str(i)] = _chunk_sha(block_ids, block_probs)
                _write_manifest(path, manifest)
                ids[lo:hi], probs[lo:hi] = block_ids, block_probs
                computed += hi - lo
                bar.update(hi - lo)
    return GuidanceTable(ids=ids, probs=probs, path=path, computed_rows=computed,
                         seconds=time.perf_counter() - began if computed else 0.0)
