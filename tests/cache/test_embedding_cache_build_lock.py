"""Two processes building one embedding cache give one correct table and no crash.

Cold-cache two-process ``stem-jax eval`` runs sharing one ``STEM_CACHE_DIR`` crashed one process in 1 of
4 tries (``FileNotFoundError`` renaming ``entities.zarr/manifest.json``): the second builder found a folder
holding only the first one's temp manifest, took it for a build killed before its first manifest, and
deleted it under the first one's feet. Each table now has a build lock (``flock`` on ``<table>/.lock``):
a second builder waits for it (one line on stderr naming the holder's pid), then reads the finished table,
or resumes it when the holder was killed. A complete table is read without the lock.

The processes are synchronised with events, not sleeps: a builder stops at a named point (its first
manifest rename, or its k-th chunk) until the test lets it go, and the test lets it go once the second
process has said that it waits (or has ended: without the lock it never waits).
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from build_lock_cases import file_times, holder_and_waiter, race, refuse_build_lock, run_on_read_only_mount
from build_lock_harness import TIMEOUT, collect, instrument_child, spawn_context

from stem_jax.encoder import HashingEncoder, open_or_build

TEXTS = [f"entity {i} directed by person {i % 7}" for i in range(50)]
CHUNK, DIM = 8, 32  # 7 chunks, the last one partial


def _reference() -> np.ndarray:
    vectors = HashingEncoder(dim=DIM).encode(TEXTS).astype(np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return vectors.astype(np.float16)


class _Pausing:
    """The hashing encoder, stopping before its ``pause_at``-th call until ``go`` is set."""

    def __init__(self, pause_at: int | None, paused, go):
        self.inner = HashingEncoder(dim=DIM)
        self.name, self.dim = self.inner.name, self.inner.dim
        self.calls, self.pause_at, self.paused, self.go = 0, pause_at, paused, go

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self.calls == self.pause_at:
            self.paused.set()
            self.go.wait(TIMEOUT)
        self.calls += 1
        return self.inner.encode(texts)


def _build(path: str, results, name: str, *, waiting=None, paused=None, go=None, pause_at: int | None = None,
           pause_at_manifest: bool = False, barrier=None) -> None:
    """Child process: build the table at ``path``; put ``(name, encoded_rows, array bytes)`` on ``results``."""
    instrument_child(waiting=waiting, paused=paused, go=go, pause_at_manifest=pause_at_manifest)
    if barrier is not None:
        barrier.wait(TIMEOUT)
    table = open_or_build(Path(path), TEXTS, _Pausing(pause_at, paused, go), CHUNK, progress=False)
    results.put((name, table.encoded_rows, table.array.tobytes()))


def _check_table_on_disk(path: Path) -> None:
    """Reopened by this process: complete, nothing encoded, exactly the reference rows."""

    class Refusing:
        name, dim = HashingEncoder(dim=DIM).name, DIM

        def encode(self, texts):
            raise AssertionError("a complete table was encoded again")

    table = open_or_build(path, TEXTS, Refusing(), CHUNK, progress=False)
    assert table.encoded_rows == 0 and table.recomputed_chunks == []
    np.testing.assert_array_equal(table.array, _reference())


def test_second_builder_waits_while_the_first_writes_its_first_manifest(tmp_path, procs):
    """The reported crash, made deterministic: A stops between its first manifest's temp file and the
    rename; B starts. Before the lock B deleted A's temp file (a 'folder killed before its manifest') and
    A died renaming it (FileNotFoundError). Now B waits for A, then reads A's table."""
    ctx, path = spawn_context(), tmp_path / "entities.zarr"
    results = ctx.Queue()
    pair = holder_and_waiter(ctx, procs, _build, (str(path), results, "a"), (str(path), results, "b"), pause_at_manifest=True)
    pair.release()
    got = collect(results, 2)
    assert got["a"][0] == len(TEXTS) and got["b"][0] == 0  # built once, by A; B read it
    assert got["a"][1] == got["b"][1] == _reference().tobytes()
    _check_table_on_disk(path)


def test_killed_builder_is_resumed_by_the_waiting_process(tmp_path, procs):
    """A writes 3 chunks and stops; B waits for A's lock; A is SIGKILLed (the OS drops its flock) and B
    finishes the table from A's chunks: it encodes only the 4 chunks A did not write."""
    ctx, path = spawn_context(), tmp_path / "entities.zarr"
    results = ctx.Queue()
    pair = holder_and_waiter(ctx, procs, _build, (str(path), results, "a"), (str(path), results, "b"), pause_at=3)
    pair.kill_holder()
    got = collect(results, 1)
    assert got["b"][0] == len(TEXTS) - 3 * CHUNK
    assert got["b"][1] == _reference().tobytes()
    _check_table_on_disk(path)


@pytest.mark.parametrize("round_", range(3))
def test_two_builders_started_together_give_one_table(tmp_path, procs, round_):
    """Both start at a barrier on a cold cache: both exit 0 with the same rows, and the rows were
    encoded once between them (without the lock both encoded, and 1 of 4 runs crashed)."""
    ctx, path = spawn_context(), tmp_path / f"texts-{round_}.zarr"
    results = ctx.Queue()
    race(ctx, procs, _build, lambda name: (str(path), results, name))
    got = collect(results, 2)
    assert got["a"][1] == got["b"][1] == _reference().tobytes()
    assert sorted(rows for rows, _ in got.values()) == [0, len(TEXTS)]
    _check_table_on_disk(path)


def test_complete_cache_is_read_without_the_lock(tmp_path, monkeypatch):
    """A complete table is read in place: no lock taken, no file created or changed (a read-only or
    shared cache folder). An incomplete one needs the lock, and an unwritable folder is then the OS's
    error (the schema-text cache falls back to memory on it)."""
    import stem_jax.encoder.cache as cache_module

    path = tmp_path / "texts.zarr"
    open_or_build(path, TEXTS, HashingEncoder(dim=DIM), CHUNK, progress=False)
    before = refuse_build_lock(monkeypatch, cache_module, path)
    table = open_or_build(path, TEXTS, HashingEncoder(dim=DIM), CHUNK, progress=False)
    assert table.encoded_rows == 0
    np.testing.assert_array_equal(table.array, _reference())
    assert file_times(path) == before

    with pytest.raises(OSError) as err:  # one text more: not this table, so it must be built
        open_or_build(tmp_path / "other.zarr", TEXTS + ["x"], HashingEncoder(dim=DIM), CHUNK, progress=False)
    assert err.value.errno == errno.EROFS


READ_SCRIPT = """
import errno, hashlib, sys
from pathlib import Path
from stem_jax.encoder import HashingEncoder, open_or_build
texts = [f"entity {i} directed by person {i % 7}" for i in range(50)]
table = open_or_build(Path(sys.argv[1]) / "texts.zarr", texts, HashingEncoder(dim=32), 8, progress=False)
print("read", table.encoded_rows, hashlib.sha256(table.array.tobytes()).hexdigest())
try:
    open_or_build(Path(sys.argv[1]) / "other.zarr", texts[:49], HashingEncoder(dim=32), 8, progress=False)
except OSError as err:
    print("build", errno.errorcode[err.errno])
"""


def test_complete_cache_on_a_read_only_mount_is_read(tmp_path):
    """The same on a real read-only filesystem: the cache folder bind-mounted read-only in a user namespace
    (skipped where ``unshare`` cannot do that)."""
    cache = tmp_path / "cache"
    open_or_build(cache / "texts.zarr", TEXTS, HashingEncoder(dim=DIM), CHUNK, progress=False)
    script = tmp_path / "read.py"
    script.write_text(READ_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    done = run_on_read_only_mount(cache, f"{script} {cache}", env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"read 0 {hashlib.sha256(_reference().tobytes()).hexdigest()}", "build EROFS"]
