"""Resumable on-disk tables: TensorStore zarr3 arrays sharing a row axis, one manifest, per-chunk sha256.

The encoder cache (:mod:`stem_jax.encoder.cache`), the GNN guidance cache
(:mod:`stem_jax.gnn.cache`) and the plan store (:mod:`stem_jax.plan.store`) are each one
:class:`ZarrTable`: a folder holding

* one zarr3 array per :class:`Column` (``<name>.zarr/``, or the folder itself for a column with
  ``folder=""``), all ``[n, *row_shape]``, chunked ``chunk_rows`` rows at a time, little-endian
  bytes + zstd level 3;
* ``manifest.json``: the inputs the table was built from (they must match to reuse it), anything
  the owner records, and ``chunks``: per finished chunk (``"i"``), the sha256 of its bytes (each
  column's block in column order, little-endian, then optional ``extra`` bytes such as a sidecar).

Chunks are written one at a time: the chunk's old files are deleted (so a torn file is never merged
into a rewrite), the arrays written, then the manifest rewritten atomically (temp file +
``os.replace``). A killed build therefore resumes at the first unfinished chunk. On open the owner
calls :meth:`ZarrTable.verify`: every finished chunk is read back and checked against its sha256;
a corrupt or missing chunk is dropped from the manifest with a warning, to be computed again.

A folder that holds only a table's own files (arrays, manifest, temp and lock files) but no readable
manifest (a build killed before its first manifest, a damaged manifest) or damaged array metadata is
started over with a warning; a folder holding anything else is never touched.

Concurrent processes: an owner that builds a table while others may build it too (the encoder cache)
holds :func:`stem_jax.locks.build_lock` on the table folder around :meth:`ZarrTable.open_or_create`
and its chunk writes; the lock file ``.lock`` is the table's own, kept by a start-over or a rebuild. A
complete table is opened without the lock by :meth:`ZarrTable.open_complete` (read only, writes
nothing, so a read-only folder works): a manifest only ever lists chunks whose arrays are written, and
is replaced in one rename, so a reader sees either the old or the new list, never a torn one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorstore as ts

from stem_jax.atomic import write_json_atomic
from stem_jax.errors import CacheError
from stem_jax.locks import LOCK_FILE

MANIFEST = "manifest.json"
_CODECS = ({"name": "bytes", "configuration": {"endian": "little"}},
           {"name": "zstd", "configuration": {"level": 3, "checksum": False}})
_ROOT_ENTRIES = ("zarr.json", "c")  # what a zarr3 array written into the table folder itself puts there


# ---------------------------------------------------------------------------------------------
# Fingerprints
# ---------------------------------------------------------------------------------------------


def strings_sha256(items: Sequence[str], *, counted: bool = True) -> str:
    """sha256 over length-prefixed strings (``["ab", "c"]`` and ``["a", "bc"]`` differ).

    ``counted`` also prefixes the number of strings (the encoder cache's ``texts_sha256``); the
    plan store's ``qids_sha256`` and ``relations_sha256`` are written without it.
    """
    digest = hashlib.sha256()
    if counted:
        digest.update(len(items).to_bytes(8, "little"))
    for item in items:
        data = item.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def json_sha256(obj: Any) -> str:
    """sha256 of a JSON-able object (sorted keys; non-JSON values through ``str``)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------
# Columns, manifests, chunk digests
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Column:
    """One array of a table: ``[n, *row_shape]`` of ``dtype`` (zarr name: float16, int32, float32)."""

    name: str
    dtype: str
    row_shape: tuple[int, ...]
    fill: float | int = 0
    folder: str | None = None  # None: "<name>.zarr"; "": the table folder itself

    @property
    def subdir(self) -> str:
        return f"{self.name}.zarr" if self.folder is None else self.folder

    @property
    def entries(self) -> tuple[str, ...]:
        """Names this column occupies directly in the table folder."""
        return _ROOT_ENTRIES if self.subdir in ("", ".") else (Path(self.subdir).parts[0],)

    def spec(self, path: Path, n: int, chunk_rows: int) -> dict[str, Any]:
        """The TensorStore spec of this column's zarr3 array in table folder ``path``."""
        return {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": str(path / self.subdir)},
            "metadata": {
                "shape": [n, *self.row_shape],
                "data_type": self.dtype,
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk_rows, *self.row_shape]}},
                "codecs": [dict(c) for c in _CODECS],
                "fill_value": self.fill,
            },
        }


def chunk_sha256(columns: Sequence[Column], blocks: Mapping[str, np.ndarray], extra: bytes = b"") -> str:
    """sha256 of one chunk: each column's block as little-endian bytes of its dtype, in column order, then ``extra``."""
    digest = hashlib.sha256()
    for column in columns:
        digest.update(np.ascontiguousarray(blocks[column.name], np.dtype(column.dtype).newbyteorder("<")).tobytes())
    digest.update(extra)
    return digest.hexdigest()


def read_manifest(path: Path, required: Sequence[str] = ()) -> dict[str, Any] | None:
    """The manifest of table folder ``path``; None when missing, unreadable, or lacking ``chunks`` or ``required``."""
    try:
        manifest = json.loads((Path(path) / MANIFEST).read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("chunks"), dict):
        return None
    if any(k not in manifest for k in required):
        return None
    return manifest


def write_failure(path: Path, chunk: int, finished: int, err: BaseException) -> str:
    """One line for a chunk TensorStore could not write (disk full, permissions): what, where, how to fix."""
    status = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return (f"{path}: cannot write chunk {chunk} ({status[:300]}); the {finished} chunks written before it are kept "
            "and a rerun resumes from them\n  how to fix: free space on that disk or make the folder writable, then "
            "run the same command again (or pass another --cache-dir / STEM_CACHE_DIR)")


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """Replace ``path/manifest.json`` atomically (unique temp file in the folder, fsync, rename), then fsync
    the folder so that the rename itself survives a crash."""
    write_json_atomic(Path(path) / MANIFEST, manifest)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a directory; the rename is atomic either way
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TableKind:
    """How one kind of table talks about itself in errors and warnings."""

    name: str  # "embedding cache", "plan store", ...
    warning: type[Warning] = UserWarning
    fix: str = "delete the folder {path}"  # how to fix, ``{path}`` filled in
    noun: str = "cache"  # "<noun> has X, this run has Y"
    redo: str = "recomputing it"  # what happens to a corrupt chunk
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)  # manifest key -> readable name
    extra_entries: tuple[str, ...] = ()  # other files or folders the table owns (the plan store's sidecar)
    required: tuple[str, ...] = ()  # manifest keys without which a manifest is unreadable

    @property
    def a_name(self) -> str:
        return f"{'an' if self.name[:1] in 'aeiou' else 'a'} {self.name}"

    def fix_for(self, path: Path) -> str:
        return self.fix.format(path=path)


class ZarrTable:
    """An open table: its folder, columns, manifest and TensorStore arrays (see the module docstring)."""

    def __init__(self, path: Path, columns: Sequence[Column], manifest: dict[str, Any], *, kind: TableKind,
                 create: bool = False, writable: bool = True):
        self.path = Path(path)
        self.columns = tuple(columns)
        self.manifest = manifest
        self.kind = kind
        self.n = int(manifest["n"])
        self.chunk_rows = int(manifest["chunk_rows"])
        self.arrays: dict[str, Any] = {}
        for column in self.columns:
            try:
                self.arrays[column.name] = ts.open(column.spec(self.path, self.n, self.chunk_rows), open=True,
                                                   create=create, read=True, write=writable).result()
            except ValueError as err:
                raise CacheError(f"{self.path}: cannot open {column.subdir or 'the array'} ({err})\n"
                                 f"  how to fix: {kind.fix_for(self.path)}") from None

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def open_complete(cls, path: Path, columns: Sequence[Column], expected: dict[str, Any], *,
                      kind: TableKind) -> ZarrTable | None:
        """The complete table at ``path`` built from ``expected``, opened read-only; None when it is absent,
        unfinished or unreadable (then build it with :meth:`open_or_create`, under the build lock).

        Takes no lock and writes nothing. The chunks are not checked here: call :meth:`verify` with
        ``repair=False`` and rebuild under the lock when it finds any. A table built from other inputs
        raises :class:`CacheError`, as :meth:`open_or_create` does.
        """
        path = Path(path)
        manifest = read_manifest(path, kind.required) if path.is_dir() else None
        if manifest is None:
            return None
        cls._check_inputs(path, manifest, expected, kind)
        try:
            table = cls(path, columns, manifest, kind=kind, writable=False)
        except CacheError:  # arrays missing or damaged: the builder starts them over
            return None
        return table if table.complete() else None

    @staticmethod
    def _check_inputs(path: Path, manifest: dict[str, Any], expected: dict[str, Any], kind: TableKind) -> None:
        diffs = [f"{kind.labels.get(k, k)}: {kind.noun} has {manifest.get(k)!r}, this run has {v!r}"
                 for k, v in expected.items() if manifest.get(k) != v]
        if diffs:
            raise CacheError(f"{path}: {kind.name} was built for other inputs\n  " + "\n  ".join(diffs)
                             + f"\n  how to fix: {kind.fix_for(path)}")

    @classmethod
    def open_or_create(cls, path: Path, columns: Sequence[Column], expected: dict[str, Any], *, kind: TableKind,
                       fresh: dict[str, Any] | None = None, rebuild: bool = False) -> ZarrTable:
        """The table at ``path`` built from ``expected`` inputs (which hold ``n`` and ``chunk_rows``), created if absent.

        ``fresh`` adds fields to a new manifest. A table built from other inputs raises
        :class:`CacheError` naming each difference; ``rebuild=True`` deletes the folder's contents first
        (all but a build lock's file). Writes: call it under the table's build lock when other processes
        may build the same table.
        """
        path = Path(path)
        if rebuild and path.is_dir():
            cls._clear(path)
        cls.refuse_foreign(path, columns, kind)
        manifest = read_manifest(path, kind.required) if path.is_dir() else None
        if manifest is None and path.is_dir() and any(e.name != LOCK_FILE for e in path.iterdir()):
            reason = "unreadable manifest" if (path / MANIFEST).exists() else f"killed before its first {MANIFEST}"
            cls._start_over(path, reason, kind)
        if manifest is not None:
            cls._check_inputs(path, manifest, expected, kind)
            try:
                # create=True too: a build killed right after its first manifest has no arrays yet
                return cls(path, columns, manifest, kind=kind, create=True)
            except CacheError as err:  # damaged array metadata: its chunks cannot be trusted either
                cls._start_over(path, str(err).split("\n")[0].removeprefix(f"{path}: "), kind)
        path.mkdir(parents=True, exist_ok=True)
        manifest = {**expected, **(fresh or {}), "chunks": {}}
        write_manifest(path, manifest)
        return cls(path, columns, manifest, kind=kind, create=True)

    @classmethod
    def refuse_foreign(cls, path: Path, columns: Sequence[Column], kind: TableKind, *, rebuild: bool = False) -> None:
        """Raise :class:`CacheError` when ``path`` is a file, or (unless ``rebuild``, which clears it) a folder
        without a readable manifest that holds files a table does not own: such a folder is never written
        to (a build lock's file included).
        """
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise CacheError(f"{path}: is a file, not {kind.a_name} folder\n  how to fix: delete or move it")
        if not rebuild and path.is_dir() and read_manifest(path, kind.required) is None and \
                not cls._own_files_only(path, columns, kind):
            raise CacheError(f"{path}: folder exists but is not {kind.a_name} (no readable {MANIFEST})\n"
                             f"  how to fix: {kind.fix_for(path)}")

    @staticmethod
    def _own_files_only(path: Path, columns: Sequence[Column], kind: TableKind) -> bool:
        own = {MANIFEST, LOCK_FILE, *kind.extra_entries, *(e for c in columns for e in c.entries)}
        return all(e.name in own or e.name.endswith((".tmp", ".__lock")) for e in path.iterdir())

    @staticmethod
    def _start_over(path: Path, reason: str, kind: TableKind) -> None:
        warnings.warn(f"{path}: {reason}; building this {kind.name} again", kind.warning, stacklevel=4)
        ZarrTable._clear(path)

    @staticmethod
    def _clear(path: Path) -> None:
        """Delete everything in the table folder but the build lock's file (a waiter holds its inode)."""
        for entry in path.iterdir():
            if entry.name != LOCK_FILE:
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()

    # -- chunks -------------------------------------------------------------------------------

    @property
    def done(self) -> dict[str, str]:
        """Finished chunks: ``"i"`` -> sha256 (the manifest's ``chunks``)."""
        return self.manifest["chunks"]

    @property
    def n_chunks(self) -> int:
        return -(-self.n // self.chunk_rows)

    def bounds(self, chunk: int) -> tuple[int, int]:
        """Rows ``[lo, hi)`` of chunk ``chunk``."""
        return chunk * self.chunk_rows, min(self.n, (chunk + 1) * self.chunk_rows)

    def todo(self) -> list[int]:
        """Chunks not finished yet, in order."""
        return [i for i in range(self.n_chunks) if str(i) not in self.done]

    def complete(self) -> bool:
        return len(self.done) == self.n_chunks

    def read(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        """Rows ``[lo, hi)`` of every column."""
        return {c.name: np.asarray(self.arrays[c.name][lo:hi].read().result()) for c in self.columns}

    def verify(self, *, extra: Callable[[int], bytes] | None = None,
               into: Mapping[str, np.ndarray] | None = None, repair: bool = True) -> list[int]:
        """Check every finished chunk against its sha256; drop (and warn about) those that fail.

        ``extra(i)`` returns chunk ``i``'s extra digest bytes (may raise ``OSError``); verified
        blocks are copied into ``into[name][lo:hi]`` when given. Returns the dropped chunks.
        ``repair=False`` (a reader without the build lock) only returns the failing chunks: no
        warning, nothing dropped or saved.
        """
        dropped = []
        for key in sorted(self.done, key=int):
            i = int(key)
            lo, hi = self.bounds(i)
            try:
                blocks = self.read(lo, hi)
                ok = chunk_sha256(self.columns, blocks, extra(i) if extra else b"") == self.done[key]
                reason = "checksum mismatch"
            except (ValueError, OSError) as err:  # TensorStore reports undecodable chunk files as ValueError
                ok, reason = False, str(err) or type(err).__name__
            if ok:
                for name, out in (into or {}).items():
                    out[lo:hi] = blocks[name]
                continue
            if not repair:
                dropped.append(i)
                continue
            warnings.warn(f"{self.path}: chunk {i} (rows {lo}-{hi - 1}) is corrupt ({reason}); {self.kind.redo}",
                          self.kind.warning, stacklevel=2)
            del self.done[key]
            dropped.append(i)
        if dropped:
            self.save()
        return dropped

    def write_chunk(self, chunk: int, blocks: Mapping[str, np.ndarray], extra: bytes = b"") -> None:
        """Write chunk ``chunk`` of every column, then record its sha256 in the manifest (saved atomically).

        Fields the owner changed in :attr:`manifest` go down in the same write.
        """
        lo, hi = self.bounds(chunk)
        cast = {}
        for column in self.columns:
            block = np.asarray(blocks[column.name], column.dtype)
            if block.shape != (hi - lo, *column.row_shape):
                raise CacheError(f"{self.path}: chunk {chunk} of {column.name} has shape {block.shape}, "
                                 f"expected {(hi - lo, *column.row_shape)}")
            cast[column.name] = block
        for column in self.columns:  # a corrupt or torn chunk file would be read back to merge a partial chunk
            old = self.path / column.subdir / "c" / str(chunk)
            shutil.rmtree(old) if old.is_dir() else old.unlink(missing_ok=True)
        for column in self.columns:
            try:
                self.arrays[column.name][lo:hi].write(cast[column.name]).result()
            except ValueError as err:  # TensorStore's status (RESOURCE_EXHAUSTED, PERMISSION_DENIED, ...)
                raise CacheError(write_failure(self.path, chunk, len(self.done), err)) from None
        self.done[str(chunk)] = chunk_sha256(self.columns, cast, extra)
        self.save()

    def save(self) -> None:
        write_manifest(self.path, self.manifest)
