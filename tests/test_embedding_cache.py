"""TensorStore embedding cache: round trip, no-op rerun, resume after a kill, mismatch, corruption."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from stem_jax.encoder import CacheWarning, HashingEncoder, open_or_build
from stem_jax.errors import CacheError

TEXTS = [f"entity {i} directed by person {i % 7}" for i in range(50)]
CHUNK = 8  # 7 chunks, the last one partial


class Counting:
    """Wraps an encoder, counting calls and rows; raises after ``fail_after`` calls (a 'kill')."""

    def __init__(self, inner: HashingEncoder, fail_after: int | None = None):
        self.inner, self.fail_after = inner, fail_after
        self.name, self.dim = inner.name, inner.dim
        self.calls = self.rows = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("simulated kill")
        self.calls += 1
        self.rows += len(texts)
        return self.inner.encode(texts)


def build(path: Path, encoder=None, texts=TEXTS, **kw):
    return open_or_build(
        path, texts, encoder or Counting(HashingEncoder(dim=32)), CHUNK, progress=False, **kw
    )


def test_round_trip_matches_direct_encode(tmp_path):
    enc = Counting(HashingEncoder(dim=32))
    table = build(tmp_path / "emb", enc)
    assert table.array.dtype == np.float16 and table.array.shape == (50, 32)
    assert (table.n, table.dim, table.path) == (50, 32, tmp_path / "emb")
    np.testing.assert_allclose(table.array, enc.inner.encode(TEXTS), atol=1e-3)
    assert table.encoded_rows == 50 and enc.calls == 7 and table.build_seconds > 0
    manifest = json.loads((tmp_path / "emb" / "manifest.json").read_text())
    assert manifest["chunks"].keys() == {str(i) for i in range(7)} and manifest["n"] == 50
    zarr = json.loads((tmp_path / "emb" / "zarr.json").read_text())
    assert zarr["chunk_grid"]["configuration"]["chunk_shape"] == [CHUNK, 32]
    assert [c["name"] for c in zarr["codecs"]] == ["bytes", "zstd"]


def test_rerun_is_a_no_op(tmp_path):
    first = build(tmp_path / "emb")
    enc = Counting(HashingEncoder(dim=32))
    again = build(tmp_path / "emb", enc)
    assert enc.calls == 0 and again.encoded_rows == 0 and again.build_seconds == 0.0
    np.testing.assert_array_equal(first.array, again.array)


def test_resume_after_kill_recomputes_only_missing_chunks(tmp_path):
    clean = build(tmp_path / "clean")
    with pytest.raises(KeyboardInterrupt):
        build(tmp_path / "emb", Counting(HashingEncoder(dim=32), fail_after=3))
    manifest = json.loads((tmp_path / "emb" / "manifest.json").read_text())
    assert len(manifest["chunks"]) == 3
    enc = Counting(HashingEncoder(dim=32))
    resumed = build(tmp_path / "emb", enc)
    assert enc.calls == 4 and enc.rows == 50 - 3 * CHUNK and resumed.encoded_rows == enc.rows
    np.testing.assert_array_equal(resumed.array, clean.array)


def test_mismatch_raises_with_fix_and_rebuild_recovers(tmp_path):
    build(tmp_path / "emb")
    with pytest.raises(CacheError, match=r"strings .*\n.*--rebuild"):
        build(tmp_path / "emb", texts=TEXTS[:-1] + ["something else"])
    with pytest.raises(CacheError, match="encoder: cache has 'hashing-v1-dim32'"):
        build(tmp_path / "emb", Counting(HashingEncoder(dim=16)))
    enc = Counting(HashingEncoder(dim=16))
    table = build(tmp_path / "emb", enc, rebuild=True)
    assert table.dim == 16 and enc.calls == 7


def test_foreign_folder_is_not_overwritten(tmp_path):
    (tmp_path / "emb").mkdir()
    (tmp_path / "emb" / "notes.txt").write_text("mine")
    with pytest.raises(CacheError, match="not an embedding cache"):
        build(tmp_path / "emb")


@pytest.mark.parametrize("damage", ["garbage", "swapped", "deleted"])
def test_corrupt_chunk_is_detected_and_recomputed(tmp_path, damage):
    clean = build(tmp_path / "clean")
    build(tmp_path / "emb")
    chunk = tmp_path / "emb" / "c" / "1" / "0"
    if damage == "garbage":
        with open(chunk, "r+b") as f:
            f.write(b"\xde\xad\xbe\xef" * 4)
    elif damage == "swapped":  # valid zstd data, wrong rows: only the checksum can tell
        shutil.copyfile(tmp_path / "emb" / "c" / "2" / "0", chunk)
    else:
        chunk.unlink()
    enc = Counting(HashingEncoder(dim=32))
    with pytest.warns(CacheWarning, match="chunk 1 "):
        table = build(tmp_path / "emb", enc)
    assert table.recomputed_chunks == [1] and enc.calls == 1 and enc.rows == CHUNK
    np.testing.assert_array_equal(table.array, clean.array)


def test_empty_and_single_chunk(tmp_path):
    assert build(tmp_path / "empty", texts=[]).array.shape == (0, 32)
    table = open_or_build(
        tmp_path / "one", TEXTS[:3], HashingEncoder(dim=32), chunk_rows=4096, progress=True, desc="t"
    )
    assert table.n == 3 and table.strings_per_second > 0
