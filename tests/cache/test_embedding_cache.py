"""TensorStore embedding cache: round trip, no-op rerun, resume after a kill, mismatch, corruption."""

from __future__ import annotations

import json
import shutil
import warnings
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


# ----- a cache interrupted at any point resumes; no dead ends -----


def _array_only(path: Path) -> None:
    """The state of a build killed after the array was created, before the manifest went down."""
    build(path)
    (path / "manifest.json").unlink()


KILLED_STATES = {
    "before-manifest": _array_only,
    "manifest-temp-file": lambda p: (_array_only(p), (p / ".manifest.json-x1.tmp").write_text("{"),
                                     (p / "zarr.json.__lock").write_text("")),
    "manifest-no-array": lambda p: (build(p), shutil.rmtree(p / "c"), (p / "zarr.json").unlink()),
    "chunks-not-recorded": lambda p: (build(p), (p / "manifest.json").write_text(
        json.dumps({**json.loads((p / "manifest.json").read_text()), "chunks": {}}))),
    "truncated-last-chunk": lambda p: (build(p), (p / "c" / "6" / "0").write_bytes((p / "c" / "6" / "0").read_bytes()[:9])),
    "truncated-middle-chunk": lambda p: (build(p), (p / "c" / "3" / "0").write_bytes(b"")),
    "corrupt-array-metadata": lambda p: (build(p), (p / "zarr.json").write_text("{not json")),
    "corrupt-manifest": lambda p: (build(p), (p / "manifest.json").write_text("\x00garbage")),
}


@pytest.mark.parametrize("state", sorted(KILLED_STATES))
def test_interrupted_or_damaged_cache_resumes_to_the_clean_table(tmp_path, state):
    clean = build(tmp_path / "clean")
    KILLED_STATES[state](tmp_path / "emb")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)
        table = build(tmp_path / "emb")
    np.testing.assert_array_equal(table.array, clean.array)
    enc = Counting(HashingEncoder(dim=32))
    again = build(tmp_path / "emb", enc)  # and the repaired cache is complete: a no-op rerun
    assert enc.calls == 0
    np.testing.assert_array_equal(again.array, clean.array)


def test_truncated_last_chunk_is_recomputed_alone(tmp_path):
    clean = build(tmp_path / "clean")
    KILLED_STATES["truncated-last-chunk"](tmp_path / "emb")
    enc = Counting(HashingEncoder(dim=32))
    with pytest.warns(CacheWarning, match=r"chunk 6 \(rows 48-49\) is corrupt"):
        table = build(tmp_path / "emb", enc)
    assert table.recomputed_chunks == [6] and enc.rows == 2
    np.testing.assert_array_equal(table.array, clean.array)


def test_empty_table_leaves_no_folder_and_reruns(tmp_path):
    for _ in range(2):
        assert build(tmp_path / "empty", texts=[]).n == 0
    assert not (tmp_path / "empty").exists()


def test_cache_path_that_is_a_file_is_an_error(tmp_path):
    (tmp_path / "emb").write_text("x")
    with pytest.raises(CacheError, match="is a file"):
        build(tmp_path / "emb")


KILL_SCRIPT = """
import sys, time
import numpy as np
sys.path.insert(0, sys.argv[2])
from test_embedding_cache import TEXTS
from stem_jax.encoder import HashingEncoder, open_or_build

class Slow(HashingEncoder):
    def encode(self, texts):
        time.sleep(0.02)
        return super().encode(texts)

print("ready", flush=True)
open_or_build(sys.argv[1], TEXTS, Slow(dim=32), 8, progress=False)
"""


def _kill_and_resume(tmp_path: Path, rng: np.random.Generator, rounds: int, kills: int = 3) -> int:
    """Start a build in a subprocess, SIGKILL it at a random moment, resume; repeat. Returns kills that hit mid-build."""
    import signal
    import subprocess
    import sys
    import time

    clean = build(tmp_path / "clean")
    hits = 0
    for r in range(rounds):
        path = tmp_path / f"emb{r}"
        for _ in range(kills):  # several kills into the same folder
            proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(path), str(Path(__file__).parent)],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            assert proc.stdout.readline().strip() == b"ready"
            time.sleep(float(rng.uniform(0.0, 0.2)))
            proc.send_signal(signal.SIGKILL)
            hits += proc.wait() == -signal.SIGKILL
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CacheWarning)
            table = build(path)
        np.testing.assert_array_equal(table.array, clean.array)
    return hits


def test_sigkill_at_random_points_then_resume(tmp_path):
    assert _kill_and_resume(tmp_path, np.random.default_rng(0), rounds=1, kills=2) >= 1


@pytest.mark.slow
def test_sigkill_at_random_points_then_resume_long(tmp_path):
    _kill_and_resume(tmp_path, np.random.default_rng(1), rounds=12)
