"""Compact triple rows: int8 codes with a per-row scale and a projection fitted on the KG's rows, each kernel
checked against a plain per-row reference on random inputs, and the cache they are stored in."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.rows import gathered_dots, gathered_dots_reference, project_queries, project_queries_reference
from stem_jax.config import StemConfig, validate
from stem_jax.encoder.cache import CacheWarning, EmbeddingTable
from stem_jax.encoder.compact import (
    RowFormat,
    compact_from_array,
    encode_rows,
    fit_projection,
    open_or_build_compact,
    quantise_int8,
)
from stem_jax.errors import StemError

F32 = np.float32


def unit_rows(rng, n, d, rank=None):
    x = rng.standard_normal((n, d)).astype(F32)
    if rank is not None:  # rows near a low-dimensional subspace, as sentence embeddings are
        x = x[:, :rank] @ rng.standard_normal((rank, d)).astype(F32) + 0.05 * x
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float16)


def quantise_reference(z):
    """One row, one coordinate at a time."""
    codes = np.zeros(z.shape, np.int8)
    scale = np.zeros(z.shape[0], F32)
    for i, row in enumerate(np.asarray(z, F32)):
        peak = max((abs(float(v)) for v in row), default=0.0)
        s = F32(F32(peak) / F32(127))
        scale[i] = s
        for j, v in enumerate(row):
            codes[i, j] = 0 if s == 0 else int(np.clip(np.rint(F32(v) / s), -127, 127))
    return codes, scale


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12), k=st.integers(1, 40), zero_row=st.booleans())
def test_int8_quantise_equals_reference_and_error_is_half_a_step(seed, n, k, zero_row):
    rng = np.random.default_rng(seed)
    z = (rng.standard_normal((n, k)) * rng.uniform(0.01, 3, (n, 1))).astype(F32)
    if zero_row:
        z[0] = 0
    codes, scale = quantise_int8(z)
    ref_codes, ref_scale = quantise_reference(z)
    np.testing.assert_array_equal(codes, ref_codes)
    np.testing.assert_array_equal(scale, ref_scale)
    assert codes.dtype == np.int8 and scale.dtype == F32
    error = np.abs(codes.astype(F32) * scale[:, None] - z)
    assert np.all(error <= scale[:, None] * 0.5 * (1 + 1e-5) + 1e-12)
    assert np.all(np.abs(codes).max(axis=1)[scale > 0] == 127)  # the largest coordinate is exact


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), d=st.integers(4, 48), fmt=st.sampled_from(["int8", "pca", "pca-int8"]))
def test_compact_cosine_is_within_its_bound_of_float32(seed, d, fmt):
    """|cos_compact - cos_f32| <= what the projection drops (|q| · residual) + half an int8 step per coordinate."""
    rng = np.random.default_rng(seed)
    rows = unit_rows(rng, 64, d, rank=max(2, d // 4))
    k = max(1, d // 2)
    name = {"int8": "int8", "pca": f"pca{k}", "pca-int8": f"pca{k}-int8"}[fmt]
    compact = compact_from_array(rows, name)
    q = unit_rows(rng, 64, d).astype(F32)
    exact = np.einsum("wd,wd->w", rows.astype(F32), q)
    approx = compact.dots(np.arange(64), q)
    decoded = compact.decode()
    residual = np.linalg.norm(rows.astype(F32) - decoded, axis=1)
    proj, _ = compact.project(q)
    bound = residual * 1.0 + 1e-3  # |q| = 1: the part of the row no code holds
    if compact.scale is not None:
        bound = bound + 0.5 * compact.scale * np.abs(proj).sum(axis=1)
    assert np.all(np.abs(approx - exact) <= bound + 1e-4)
    # the compact cosine is exactly the dot product with the decoded row
    np.testing.assert_allclose(approx, np.einsum("wd,wd->w", decoded, q), atol=2e-5)


def test_int8_cosines_of_encoder_like_rows_are_close():
    rng = np.random.default_rng(0)
    rows = unit_rows(rng, 2000, 384, rank=48)
    q = unit_rows(rng, 2000, 384).astype(F32)
    exact = np.einsum("wd,wd->w", rows.astype(F32), q)
    for name, tol in (("int8", 0.01), ("pca128-int8", 0.05)):
        approx = compact_from_array(rows, name).dots(np.arange(2000), q)
        assert np.abs(approx - exact).max() < tol, name


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), d=st.integers(2, 24))
def test_projection_is_the_principal_subspace(seed, d):
    rng = np.random.default_rng(seed)
    n, k = 80, max(1, d // 2)
    x = rng.standard_normal((n, d)) * np.linspace(3, 0.1, d)  # distinct variances: a unique subspace
    basis, mean, kept = fit_projection(x, k, chunk_rows=7)
    np.testing.assert_allclose(mean, x.mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(basis.T @ basis, np.eye(k), atol=1e-5)
    _, s, vt = np.linalg.svd(x - x.mean(axis=0), full_matrices=False)
    ref = vt[:k].T  # the same subspace: projectors agree
    np.testing.assert_allclose(basis @ basis.T, ref @ ref.T, atol=1e-4)
    assert kept == pytest.approx((s[:k] ** 2).sum() / (s**2).sum(), rel=1e-4)
    # sign convention: each axis' largest-magnitude entry is positive
    assert np.all(basis[np.abs(basis).argmax(axis=0), np.arange(k)] > 0)
    full, full_mean, _ = fit_projection(x, d)
    codes, _ = encode_rows(x, RowFormat.parse(f"pca{d}"), full, full_mean)
    np.testing.assert_allclose(codes.astype(F32) @ full.T + full_mean, x, atol=5e-2)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), d=st.integers(1, 20), k=st.integers(1, 20), int8=st.booleans(),
       projected=st.booleans())
def test_row_kernels_equal_their_references(seed, d, k, int8, projected):
    rng = np.random.default_rng(seed)
    k = k if projected else d
    m, w = 30, 17
    table = (rng.integers(-127, 128, (m, k)).astype(np.int8) if int8
             else rng.standard_normal((m, k)).astype(np.float16))
    scale = rng.uniform(0, 0.02, m).astype(F32) if int8 else None
    basis = rng.standard_normal((d, k)).astype(F32) if projected else None
    mean = rng.standard_normal(d).astype(F32) if projected else None
    queries = rng.standard_normal((3, 5, d)).astype(F32)
    proj, bias = project_queries(jnp.asarray(queries), None if basis is None else jnp.asarray(basis),
                                 None if mean is None else jnp.asarray(mean))
    ref_proj, ref_bias = project_queries_reference(queries, basis, mean)
    np.testing.assert_allclose(np.asarray(proj), ref_proj, rtol=1e-5, atol=1e-5)
    assert (bias is None) == (ref_bias is None)
    if bias is not None:
        np.testing.assert_allclose(np.asarray(bias), ref_bias, rtol=1e-5, atol=1e-5)
    rows = rng.integers(0, m, w).astype(np.int32)
    q = ref_proj.reshape(-1, k)[rng.integers(0, 15, w)]
    b = None if ref_bias is None else rng.standard_normal(w).astype(F32)
    got = gathered_dots(jnp.asarray(table), None if scale is None else jnp.asarray(scale), jnp.asarray(rows),
                        jnp.asarray(q), None if b is None else jnp.asarray(b))
    np.testing.assert_allclose(np.asarray(got), gathered_dots_reference(table, scale, rows, q, b), rtol=1e-4, atol=1e-4)


def test_row_formats_parse_and_size():
    assert RowFormat.parse("float16") == RowFormat("float16", None, False)
    assert not RowFormat.parse("float16").compact
    assert RowFormat.parse("int8").bytes_per_row(384) == 388
    assert RowFormat.parse("pca128-int8").bytes_per_row(384) == 132
    assert RowFormat.parse("pca96").bytes_per_row(384) == 192
    assert RowFormat.parse("pca64-float16").name == "pca64"
    for bad in ("int4", "pca0-int8", "pca", "float32", "pca12-int4"):
        with pytest.raises(StemError, match="row format"):
            RowFormat.parse(bad)
    assert RowFormat.parse("pca16").width(8) == 8  # a narrower encoder keeps all its dimensions (a rotation)
    narrow = compact_from_array(unit_rows(np.random.default_rng(0), 40, 8), "pca128-int8")
    assert narrow.codes.shape == (40, 8) and narrow.basis.shape == (8, 8)
    config = StemConfig()
    import dataclasses

    assert validate(dataclasses.replace(config, encoder=dataclasses.replace(config.encoder,
                                                                           row_format="pca128-int8"))) == []
    problems = validate(dataclasses.replace(config, encoder=dataclasses.replace(config.encoder, row_format="int3")))
    assert any("--encoder.row_format" in p for p in problems)


def test_compact_cache_is_built_once_read_back_and_repaired(tmp_path):
    rng = np.random.default_rng(1)
    rows = unit_rows(rng, 300, 32, rank=6)
    source = EmbeddingTable(array=rows, path=tmp_path / "triples.zarr", encoder_name="enc")
    assert open_or_build_compact(source, "float16") is None
    built = open_or_build_compact(source, "pca8-int8", chunk_rows=128)
    assert built.build_seconds > 0 and built.codes.shape == (300, 8) and built.bytes_per_row == 12
    assert built.path == tmp_path / "triples-pca8-int8.zarr"
    again = open_or_build_compact(source, "pca8-int8", chunk_rows=128)
    assert again.build_seconds == 0.0
    np.testing.assert_array_equal(again.codes, built.codes)
    np.testing.assert_array_equal(again.scale, built.scale)
    np.testing.assert_array_equal(again.basis, built.basis)
    assert again.explained == pytest.approx(built.explained)
    # what the cache holds is what an in-memory build makes
    memory = compact_from_array(rows, "pca8-int8")
    np.testing.assert_array_equal(memory.codes, built.codes)
    # a damaged chunk is found, warned about and recomputed
    chunk = next((built.path / "codes.zarr" / "c").rglob("*"))
    while chunk.is_dir():
        chunk = next(chunk.iterdir())
    chunk.write_bytes(b"garbage")
    with pytest.warns(CacheWarning, match="corrupt"):
        repaired = open_or_build_compact(source, "pca8-int8", chunk_rows=128)
    np.testing.assert_array_equal(repaired.codes, built.codes)
    # a lost projection is fitted again and every chunk rewritten
    (built.path / "projection.npz").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        refit = open_or_build_compact(source, "pca8-int8", chunk_rows=128)
    np.testing.assert_array_equal(refit.codes, built.codes)
    plain = open_or_build_compact(source, "int8", chunk_rows=128)
    assert plain.basis is None and plain.codes.shape == (300, 32) and plain.bytes_per_row == 36


def test_an_unwritable_cache_folder_gets_the_same_rows_in_memory(tmp_path, monkeypatch):
    import stem_jax.encoder.compact as compact

    rng = np.random.default_rng(2)
    rows = unit_rows(rng, 100, 16, rank=4)
    source = EmbeddingTable(array=rows, path=tmp_path / "triples.zarr", encoder_name="enc")

    def refused(folder, what):
        raise PermissionError(13, "Permission denied", str(folder))

    monkeypatch.setattr(compact, "build_lock", refused)  # what a read-only folder does to the lock file
    made = open_or_build_compact(source, "pca8-int8")
    assert made.path is None and not (tmp_path / "triples-pca8-int8.zarr").exists()
    np.testing.assert_array_equal(made.codes, compact_from_array(rows, "pca8-int8").codes)
