"""Two processes building one GNN guidance cache, or planning into one plan store, give one complete table.

The same race as the embedding caches' (``tests/cache/test_embedding_cache_build_lock.py``): two ``stem-jax eval
--guidance gnn`` sharing a cache folder, or two ``stem-jax plan`` with one ``--out``. Before the build lock
the second process found a folder holding only the first one's temp manifest, took it for a build killed
before its first manifest and deleted it, and the first died renaming it (``FileNotFoundError``). Now a
second builder waits on ``<table>/.lock`` (one stderr line naming the holder's pid), then rereads the
manifest: it reads the finished table, or resumes a killed holder's chunks. A complete table is read
without the lock and without writing (read-only cache folders).

The processes are synchronised as in that file (``build_lock_cases.holder_and_waiter``: events, not sleeps).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from build_lock_cases import file_times, holder_and_waiter, race, refuse_build_lock, run_on_read_only_mount
from build_lock_harness import TIMEOUT, collect, instrument_child, spawn_context

from stem_jax.data.demo_kg import load_demo
from stem_jax.gnn.cache import open_or_compute
from stem_jax.kg.index import build_index
from stem_jax.plan.base import ScoredSchema
from stem_jax.plan.oracle import OraclePlanner
from stem_jax.plan.store import PlanStore, write_plan_store

ROWS, CHUNK, WIDTH = 50, 8, 4  # 7 chunks, the last one partial
KEYS = [f"q{i}|plan" for i in range(ROWS)]
INPUTS = {"model": "test", "hops": 2}
ARRAYS = ("triples", "nodes", "answer", "strategy", "score")


# ----- what the children build ---------------------------------------------------------------


def _guidance(rows) -> tuple[np.ndarray, np.ndarray]:
    rows = np.asarray(list(rows), np.int64)
    ids = ((rows[:, None] * 7 + np.arange(WIDTH)) % 53).astype(np.int32)
    ids[rows % 5 == 0, WIDTH - 1] = -1
    probs = np.where(ids >= 0, 1.0 / (2.0 + ids), 0.0).astype(np.float32)
    return ids, probs


def _guidance_reference() -> bytes:
    ids, probs = _guidance(range(ROWS))
    return ids.tobytes() + probs.tobytes()


class _Pause:
    """Stops before the ``at``-th call until ``go`` is set."""

    def __init__(self, at: int | None, paused, go):
        self.calls, self.at, self.paused, self.go = 0, at, paused, go

    def __call__(self) -> None:
        if self.calls == self.at:
            self.paused.set()
            self.go.wait(TIMEOUT)
        self.calls += 1


class _Planner:
    """The oracle's plan plus a second made-up beam, stopping before its ``pause_at``-th chunk."""

    name = "two-beams"

    def __init__(self, pause: _Pause):
        self.pause, self.planned = pause, 0

    def plan_batch(self, questions):
        self.pause()
        self.planned += len(questions)
        out = []
        for q in questions:
            gold = OraclePlanner().plan(q)[0]
            out.append([ScoredSchema(gold, 0.75), ScoredSchema(gold, 0.25)])
        return out


def _demo():
    dataset = load_demo(split="test")
    return dataset.questions[:ROWS], build_index(dataset.triples)


def _store_content(path: Path) -> bytes:
    """The arrays and sidecar files of a complete store (its manifest holds timings, so not compared)."""
    store = PlanStore.open(path)
    digest = hashlib.sha256()
    for name in ARRAYS:
        digest.update(np.ascontiguousarray(store.arrays[name].read().result()).tobytes())
    for file in sorted((path / "sidecar").iterdir()):
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.digest()


def _child(what: str, path: str, results, name: str, *, waiting=None, paused=None, go=None,
           pause_at: int | None = None, pause_at_manifest: bool = False, barrier=None) -> None:
    """Child process: build ``what`` ("gnn" or "plan") at ``path``; put ``(name, rows computed, content)``
    on ``results``."""
    instrument_child(waiting=waiting, paused=paused, go=go, pause_at_manifest=pause_at_manifest)
    pause = _Pause(pause_at, paused, go)
    if what == "gnn":
        def compute(rows):
            pause()
            return _guidance(rows)

        if barrier is not None:
            barrier.wait(TIMEOUT)
        table = open_or_compute(Path(path), KEYS, WIDTH, compute, inputs=INPUTS, chunk_rows=CHUNK,
                                show_progress=False)
        results.put((name, table.computed_rows, table.ids.tobytes() + table.probs.tobytes()))
    else:
        questions, index = _demo()
        planner = _Planner(pause)
        if barrier is not None:
            barrier.wait(TIMEOUT)
        store = write_plan_store(Path(path), questions, planner, index, beam=3, max_triples=4, chunk_rows=CHUNK)
        assert store.complete()
        results.put((name, planner.planned, _store_content(Path(path))))


def _build_here(what: str, path: Path) -> None:
    """Build the table at ``path`` in this process."""
    if what == "gnn":
        open_or_compute(path, KEYS, WIDTH, _guidance, inputs=INPUTS, chunk_rows=CHUNK, show_progress=False)
    else:
        questions, index = _demo()
        write_plan_store(path, questions, _Planner(_Pause(None, None, None)), index, beam=3, max_triples=4,
                         chunk_rows=CHUNK)


def _reference(what: str, tmp_path: Path) -> bytes:
    if what == "gnn":
        return _guidance_reference()
    _build_here(what, tmp_path / "clean")
    return _store_content(tmp_path / "clean")


def _check_on_disk(what: str, path: Path, reference: bytes) -> None:
    """Reopened by this process: complete, nothing computed again, exactly the reference content."""

    def refuse(*args):
        raise AssertionError("a complete table was computed again")

    if what == "gnn":
        table = open_or_compute(path, KEYS, WIDTH, refuse, inputs=INPUTS, chunk_rows=CHUNK, show_progress=False)
        assert table.computed_rows == 0 and table.ids.tobytes() + table.probs.tobytes() == reference
    else:
        questions, index = _demo()
        planner = _Planner(_Pause(None, None, None))
        planner.plan_batch = refuse
        write_plan_store(path, questions, planner, index, beam=3, max_triples=4, chunk_rows=CHUNK)
        assert _store_content(path) == reference



# ----- the races ---------------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["gnn", "plan"])
def test_second_builder_waits_while_the_first_writes_its_first_manifest(tmp_path, procs, what):
    """A stops between its first manifest's temp file and the rename; B starts. Before the lock B deleted
    A's temp file (a 'folder killed before its manifest') and A died renaming it (FileNotFoundError). Now
    B waits for A, then reads A's table without computing a row."""
    ctx, path = spawn_context(), tmp_path / what
    reference = _reference(what, tmp_path)
    results = ctx.Queue()
    pair = holder_and_waiter(ctx, procs, _child, (what, str(path), results, "a"), (what, str(path), results, "b"),
                             pause_at_manifest=True)
    pair.release()
    got = collect(results, 2)
    assert got["a"][0] == ROWS and got["b"][0] == 0  # built once, by A; B read it
    assert got["a"][1] == got["b"][1] == reference
    _check_on_disk(what, path, reference)


@pytest.mark.parametrize("what", ["gnn", "plan"])
def test_killed_builder_is_resumed_by_the_waiting_process(tmp_path, procs, what):
    """A writes 3 chunks and stops; B waits for A's lock; A is SIGKILLed (the OS drops its flock) and B
    finishes the table from A's chunks: it computes only the 4 chunks A did not write."""
    ctx, path = spawn_context(), tmp_path / what
    reference = _reference(what, tmp_path)
    results = ctx.Queue()
    pair = holder_and_waiter(ctx, procs, _child, (what, str(path), results, "a"), (what, str(path), results, "b"),
                             pause_at=3)
    pair.kill_holder()
    got = collect(results, 1)
    assert got["b"] == (ROWS - 3 * CHUNK, reference)
    _check_on_disk(what, path, reference)


@pytest.mark.parametrize("what", ["gnn", "plan"])
def test_two_builders_started_together_give_one_table(tmp_path, procs, what):
    """Both start at a barrier on a cold folder: both exit 0 with the same content, computed once between
    them (the lock decides who; the other reads the finished table)."""
    ctx, path = spawn_context(), tmp_path / what
    reference = _reference(what, tmp_path)
    results = ctx.Queue()
    race(ctx, procs, _child, lambda name: (what, str(path), results, name))
    got = collect(results, 2)
    assert got["a"][1] == got["b"][1] == reference
    assert sorted(rows for rows, _ in got.values()) == [0, ROWS]
    _check_on_disk(what, path, reference)


# ----- a complete table is read without the lock ----------------------------------------------------


@pytest.mark.parametrize("what", ["gnn", "plan"])
def test_complete_table_is_read_without_the_lock(tmp_path, monkeypatch, what):
    """A complete table is read in place: no lock taken, no file created or changed. An incomplete one
    needs the lock, and an unwritable folder is then the OS's error."""
    import stem_jax.gnn.cache as gnn_cache
    import stem_jax.plan.store as plan_store

    path = tmp_path / what
    reference = _reference(what, tmp_path)
    _build_here(what, path)
    before = refuse_build_lock(monkeypatch, gnn_cache if what == "gnn" else plan_store, path)
    _check_on_disk(what, path, reference)
    assert file_times(path) == before

    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["chunks"]["6"]  # one chunk short: it must be finished, under the lock
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OSError) as err:
        _check_on_disk(what, path, reference)
    assert err.value.errno == errno.EROFS


READ_SCRIPT = """
import errno, hashlib, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import test_guidance_plan_build_lock as t
cache = Path(sys.argv[1])
for what in ("gnn", "plan"):
    t._check_on_disk(what, cache / what, bytes.fromhex(sys.argv[3 if what == "gnn" else 4]))
    print("read", what)
t.PlanStore.open(cache / "plan").beams()
print("open plan")
try:
    t.open_or_compute(cache / "other", t.KEYS, t.WIDTH, t._guidance, inputs=t.INPUTS, chunk_rows=t.CHUNK,
                      show_progress=False)
except OSError as err:
    print("build", errno.errorcode[err.errno])
"""


def test_complete_tables_on_a_read_only_mount_are_read(tmp_path):
    """The same on a real read-only filesystem: the cache folder bind-mounted read-only in a user namespace
    (skipped where ``unshare`` cannot do that)."""
    cache = tmp_path / "cache"
    references = {what: _reference(what, tmp_path) for what in ("gnn", "plan")}
    for what in references:
        _build_here(what, cache / what)
    script = tmp_path / "read.py"
    script.write_text(READ_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), str(Path(__file__).parents[1])])}
    done = run_on_read_only_mount(cache, f"{script} {cache} {Path(__file__).parent} {references['gnn'].hex()} "
                                         f"{references['plan'].hex()}", env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["read gnn", "read plan", "open plan", "build EROFS"]
