"""Compact embedding rows: the KG's float16 rows stored in fewer bytes, built once next to their cache.

A row format (``encoder.row_format``) names how a unit-norm d-dimensional encoder row is stored:

* ``float16``: the cache itself, 2·d bytes a row (768 B for MiniLM's d = 384); nothing is built;
* ``int8``: d int8 codes and a float32 scale per row (d + 4 bytes), ``row ≈ scale · code``;
* ``pca<k>``: the row projected on the k leading principal axes of this KG's own rows, float16 (2·k bytes);
* ``pca<k>-int8``: that projection, then int8 codes with a per-row scale (k + 4 bytes: 132 B at k = 128).

The projection is fitted on the table itself (mean and covariance over every row, in float64, one pass over
chunks; eigen-decomposition of the d x d covariance), so it is the best rank-k approximation of this KG's
rows in the least-squares sense: ``row ≈ mean + basis @ z``. Int8 codes are symmetric per row:
``scale = max|z| / 127``, ``code = round(z / scale)``, so a row's largest coordinate is exact and every other
one is within ``scale / 2``. The cosine with a query ``q`` is then ``scale · (code · basisᵀq) + q · mean``
(:mod:`kernels.rows`): schema-step queries are projected the same way, once per batch, inside the trace kernel.

Cache layout: ``<cache folder>/<table>-<format>.zarr/`` is a :class:`~stem_jax.zarr_table.ZarrTable` with the
columns ``codes`` (int8 or float16 [n, k]) and ``scale`` (float32 [n], int8 formats only), plus
``projection.npz`` (basis [d, k], mean [d]; its sha256 in the manifest). It is keyed by the source table's
strings, encoder and chunk checksums, so new rows (another KG, encoder or names) never reuse it; it is
resumable chunk by chunk and verified on open like the float16 cache, under the same build lock discipline.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import re
import time
from pathlib import Path

import numpy as np

from stem_jax.array_fields import axis_length
from stem_jax.atomic import write_bytes_atomic
from stem_jax.encoder.cache import CacheWarning, EmbeddingTable
from stem_jax.errors import CacheError, StemError
from stem_jax.locks import build_lock
from stem_jax.zarr_table import Column, TableKind, ZarrTable, json_sha256, read_manifest

F32 = np.float32
FORMAT_VERSION = 1
PROJECTION = "projection.npz"
INT8_MAX = 127
_FORMAT = re.compile(r"^(?:(float16|int8)|pca(\d+)(?:-(int8|float16))?)$")


@dataclasses.dataclass(frozen=True)
class RowFormat:
    """A parsed ``encoder.row_format``: projected dimensions (None: the encoder's) and the code type."""

    name: str
    dims: int | None
    int8: bool

    @classmethod
    def parse(cls, text: str) -> RowFormat:
        match = _FORMAT.match(str(text).strip())
        if match is None or (match.group(2) is not None and int(match.group(2)) < 1):
            raise StemError(f"unknown row format {text!r}\n  how to fix: use float16, int8, pca<k> or pca<k>-int8 "
                            "(e.g. pca128-int8)")
        plain, dims, code = match.groups()
        if plain is not None:
            return cls(plain, None, plain == "int8")
        code = code or "float16"
        name = f"pca{int(dims)}" + ("-int8" if code == "int8" else "")
        return cls(name, int(dims), code == "int8")

    @property
    def compact(self) -> bool:
        """Whether rows are stored other than as the float16 cache."""
        return self.name != "float16"

    def width(self, source_dim: int) -> int:
        """Coordinates stored per row: k, or all ``source_dim`` of a narrower encoder (then the projection
        is a rotation and keeps every row, up to the codes' rounding)."""
        return source_dim if self.dims is None else min(self.dims, source_dim)

    def bytes_per_row(self, source_dim: int) -> int:
        k = self.width(source_dim)
        return k + 4 if self.int8 else 2 * k


@dataclasses.dataclass
class CompactRows:
    """A table's rows in a compact format, in memory: ``row ≈ mean + basis @ (scale · codes)``."""

    format: str
    codes: np.ndarray  # int8 or float16 [n, k]
    scale: np.ndarray | None  # float32 [n] (int8 formats)
    basis: np.ndarray | None  # float32 [d, k] orthonormal columns (pca formats)
    mean: np.ndarray | None  # float32 [d] (pca formats)
    path: Path | None = None
    build_seconds: float = 0.0  # spent fitting and writing in this call (0 when cached)
    explained: float | None = None  # share of the rows' variance the projection keeps (pca formats)

    n = axis_length("codes", 0, "Rows: one per row of the float table they compact.")
    width = axis_length("codes", 1, "Stored values per row (the projection's width for the pca formats).")

    @property
    def source_dim(self) -> int:
        return int(self.basis.shape[0]) if self.basis is not None else self.width

    @property
    def bytes_per_row(self) -> int:
        return self.codes.dtype.itemsize * self.width + (self.scale.dtype.itemsize if self.scale is not None else 0)

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + (self.scale.nbytes if self.scale is not None else 0))

    def project(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Queries [..., d] -> (float32 [..., k], bias [...] or None): what :func:`dots` multiplies rows by."""
        q = np.asarray(queries, F32)
        bias = None if self.mean is None else q @ self.mean
        return (q if self.basis is None else q @ self.basis), bias

    def dots(self, rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """float32 [W]: approximate cosine of row ``rows[w]`` with query ``queries[w]`` [W, d] (vectorised)."""
        proj, bias = self.project(queries)
        out = np.einsum("wk,wk->w", self.codes[rows].astype(F32), proj)
        if self.scale is not None:
            out = out * self.scale[rows]
        return out if bias is None else out + bias

    def decode(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """float32 [hi - lo, d]: rows ``lo:hi`` back in the encoder's space (for measuring the approximation)."""
        z = self.codes[lo:hi].astype(F32)
        if self.scale is not None:
            z = z * self.scale[lo:hi, None]
        if self.basis is not None:
            z = z @ self.basis.T
        return z if self.mean is None else z + self.mean


# ---------------------------------------------------------------------------------------------
# Fitting and quantising (vectorised, each with a plain reference in the tests' reach)
# ---------------------------------------------------------------------------------------------


def fit_projection(rows: np.ndarray, k: int, chunk_rows: int = 65536) -> tuple[np.ndarray, np.ndarray, float]:
    """The k principal axes of ``rows`` [n, d]: (basis float32 [d, k], mean float32 [d], kept variance share).

    Mean and covariance are summed in float64 over chunks (no float32 copy of the table); axes are the
    eigenvectors of the covariance by decreasing eigenvalue, each signed so that its largest-magnitude
    entry is positive (the fit is a function of the rows, not of the eigensolver's signs)."""
    n, d = rows.shape
    if not 1 <= k <= d:
        raise ValueError(f"cannot keep {k} of {d} dimensions")
    total = np.zeros(d, np.float64)
    gram = np.zeros((d, d), np.float64)
    for lo in range(0, n, chunk_rows):
        block = np.asarray(rows[lo : lo + chunk_rows], np.float64)
        total += block.sum(axis=0)
        gram += block.T @ block
    mean = total / max(n, 1)
    cov = gram / max(n, 1) - np.outer(mean, mean)
    values, vectors = np.linalg.eigh((cov + cov.T) / 2)
    order = np.argsort(-values, kind="stable")[:k]
    basis = vectors[:, order]
    signs = np.sign(basis[np.abs(basis).argmax(axis=0), np.arange(k)])
    basis = basis * np.where(signs == 0, 1.0, signs)
    kept = float(np.clip(values[order], 0, None).sum() / max(np.clip(values, 0, None).sum(), 1e-300))
    return basis.astype(F32), mean.astype(F32), kept


def quantise_int8(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8: (codes int8 [n, k], scale float32 [n]) with ``z ≈ scale · codes``.

    ``scale = max|z| / 127`` (0 for an all-zero row); ``codes = round(z / scale)`` (half to even)."""
    z = np.asarray(z, F32)
    peak = np.abs(z).max(axis=1) if z.shape[1] else np.zeros(z.shape[0], F32)
    scale = (peak / F32(INT8_MAX)).astype(F32)
    safe = np.where(scale > 0, scale, F32(1.0))
    codes = np.clip(np.rint(z / safe[:, None]), -INT8_MAX, INT8_MAX).astype(np.int8)
    return codes, scale


def encode_rows(rows: np.ndarray, fmt: RowFormat, basis: np.ndarray | None, mean: np.ndarray | None,
                ) -> tuple[np.ndarray, np.ndarray | None]:
    """Rows [n, d] in format ``fmt``: (codes [n, k], scale [n] or None)."""
    z = np.asarray(rows, F32)
    if basis is not None:
        z = (z - mean) @ basis
    if fmt.int8:
        return quantise_int8(z)
    return z.astype(np.float16), None


# ---------------------------------------------------------------------------------------------
# The cache
# ---------------------------------------------------------------------------------------------


KIND = TableKind(
    name="compact row cache",
    warning=CacheWarning,
    fix="delete the folder {path} or pass --rebuild",
    labels={"format_version": "compact row format version", "row_format": "row format", "encoder": "encoder",
            "source": "float16 rows (sha256 of their cache's chunks)", "n": "rows", "dim": "encoder dim",
            "chunk_rows": "chunk_rows"},
    extra_entries=(PROJECTION,),
)


def compact_path(source: EmbeddingTable, fmt: RowFormat) -> Path:
    """``<cache folder>/<table>-<format>.zarr`` beside the float16 table ``<table>.zarr``."""
    path = Path(source.path)
    return path.with_name(f"{path.name.removesuffix('.zarr')}-{fmt.name}.zarr")


def _columns(fmt: RowFormat, width: int) -> list[Column]:
    columns = [Column("codes", "int8" if fmt.int8 else "float16", (width,), fill=0)]
    if fmt.int8:
        columns.append(Column("scale", "float32", (), fill=0.0))
    return columns


def _source_key(source: EmbeddingTable) -> str:
    """sha256 of the float16 table's manifest (its strings, encoder and every chunk's checksum); of the rows
    themselves when the table has no manifest (a table built in memory)."""
    manifest = read_manifest(Path(source.path)) if source.path else None
    if manifest is not None:
        return json_sha256({k: manifest.get(k) for k in ("encoder", "dim", "n", "texts_sha256", "chunks")})
    return hashlib.sha256(np.ascontiguousarray(source.array).tobytes()).hexdigest()


def _projection_bytes(basis: np.ndarray, mean: np.ndarray, kept: float) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, basis=basis, mean=mean, kept=np.float64(kept))
    return buffer.getvalue()


def _read_projection(path: Path, sha: str | None) -> tuple[np.ndarray, np.ndarray, float] | None:
    try:
        data = (path / PROJECTION).read_bytes()
    except OSError:
        return None
    if sha is None or hashlib.sha256(data).hexdigest() != sha:
        return None
    with np.load(io.BytesIO(data)) as npz:
        return np.asarray(npz["basis"], F32), np.asarray(npz["mean"], F32), float(npz["kept"])


def open_or_build_compact(source: EmbeddingTable, row_format: str, *, chunk_rows: int = 65536,
                          rebuild: bool = False) -> CompactRows | None:
    """The rows of ``source`` in ``row_format`` (None for ``float16``), read from their cache or built into it.

    A complete cache is read without a lock; otherwise the build holds the folder's build lock, fits the
    projection once (kept in ``projection.npz``, its sha256 in the manifest: a refit restarts the chunks)
    and writes the missing chunks, each recorded with its checksum, so a killed build resumes. Where the
    cache folder cannot be written (a read-only cache), the same rows are made in memory (``path`` None)."""
    fmt = RowFormat.parse(row_format)
    if not fmt.compact:
        return None
    n, d = source.array.shape
    width = fmt.width(d)
    path = compact_path(source, fmt)
    columns = _columns(fmt, width)
    expected = {"format_version": FORMAT_VERSION, "row_format": fmt.name, "encoder": source.encoder_name,
                "source": _source_key(source), "n": int(n), "dim": int(d), "chunk_rows": int(chunk_rows)}
    if n == 0:
        return CompactRows(fmt.name, np.zeros((0, width), np.int8 if fmt.int8 else np.float16),
                           np.zeros(0, F32) if fmt.int8 else None, None, None, path)
    if not rebuild:
        table = ZarrTable.open_complete(path, columns, expected, kind=KIND)
        if table is not None:
            projection = _read_projection(path, table.manifest.get("projection_sha256")) if fmt.dims else None
            out = _empty(fmt, n, width)
            if (projection is not None or not fmt.dims) and not table.verify(into=out, repair=False):
                return _rows(fmt, out, projection, path, 0.0)
    ZarrTable.refuse_foreign(path, columns, KIND, rebuild=rebuild)
    try:
        with build_lock(path, KIND.name):
            return _build(source, fmt, path, columns, expected, rebuild)
    except OSError:  # a read-only cache folder (or a full disk): the same rows, made in memory for this run
        began = time.perf_counter()
        rows = compact_from_array(source.array, fmt.name)
        rows.build_seconds = time.perf_counter() - began
        return rows


def _empty(fmt: RowFormat, n: int, width: int) -> dict[str, np.ndarray]:
    out = {"codes": np.zeros((n, width), np.int8 if fmt.int8 else np.float16)}
    if fmt.int8:
        out["scale"] = np.zeros(n, F32)
    return out


def _rows(fmt: RowFormat, out: dict[str, np.ndarray], projection, path: Path, seconds: float) -> CompactRows:
    basis, mean, kept = projection if projection is not None else (None, None, None)
    return CompactRows(fmt.name, out["codes"], out.get("scale"), basis, mean, path, seconds, kept)


def _build(source: EmbeddingTable, fmt: RowFormat, path: Path, columns: list[Column], expected: dict,
           rebuild: bool) -> CompactRows:
    start = time.perf_counter()
    table = ZarrTable.open_or_create(path, columns, expected, kind=KIND, rebuild=rebuild)
    projection = None
    if fmt.dims:
        projection = _read_projection(path, table.manifest.get("projection_sha256"))
        if projection is None:
            projection = fit_projection(source.array, fmt.width(source.array.shape[1]))
            data = _projection_bytes(*projection)
            write_bytes_atomic(path / PROJECTION, data)
            table.manifest["projection_sha256"] = hashlib.sha256(data).hexdigest()
            table.manifest["chunks"] = {}  # chunks of another fit (a lost projection file) cannot be kept
            table.manifest["explained_variance"] = projection[2]
            table.save()
    out = _empty(fmt, *source.array.shape[:1], int(columns[0].row_shape[0]))
    table.verify(into=out)
    basis, mean = (projection[0], projection[1]) if projection is not None else (None, None)
    for i in table.todo():
        lo, hi = table.bounds(i)
        codes, scale = encode_rows(source.array[lo:hi], fmt, basis, mean)
        blocks = {"codes": codes} if scale is None else {"codes": codes, "scale": scale}
        table.write_chunk(i, blocks)
        for name, block in blocks.items():
            out[name][lo:hi] = block
    if not table.complete():  # pragma: no cover - write_chunk records every chunk it writes
        raise CacheError(f"{path}: {KIND.name} incomplete after its build\n  how to fix: {KIND.fix_for(path)}")
    return _rows(fmt, out, projection, path, time.perf_counter() - start)


def compact_from_array(rows: np.ndarray, row_format: str) -> CompactRows | None:
    """``rows`` [n, d] in ``row_format``, in memory (no cache); None for ``float16``."""
    fmt = RowFormat.parse(row_format)
    if not fmt.compact:
        return None
    projection = fit_projection(rows, fmt.width(rows.shape[1])) if fmt.dims else None
    basis, mean = (projection[0], projection[1]) if projection is not None else (None, None)
    codes, scale = encode_rows(rows, fmt, basis, mean)
    return _rows(fmt, {"codes": codes, "scale": scale} if scale is not None else {"codes": codes}, projection,
                 None, 0.0)
