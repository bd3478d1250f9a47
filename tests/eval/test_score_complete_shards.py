"""`stem-jax score` merges only complete shards of one run.

Shards are written the way `eval --num-processes 2` writes them (each process evaluates its share of
the split into shard-<i>-of-2/), in-process on the demo KG with the hashing encoder; a killed process
is a predictions file cut after its first records.
"""

from __future__ import annotations

import json

import pytest

from stem_jax import Engine, StemConfig
from stem_jax.cli.distributed import merge_shards, shard_folder, share
from stem_jax.cli.main import main
from stem_jax.config import apply_overrides
from stem_jax.errors import StemError

FAST = {"encoder.name": "hashing", "engine.batch_precision": "32", "engine.batch_breadth": "8",
        "engine.chunk_questions": "2"}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    config = apply_overrides(StemConfig(), FAST)
    return Engine.open("demo", config=config, planner="oracle", cache_dir=tmp_path_factory.mktemp("cache"), limit=4)


def run_shards(engine, out, limit: int, pids=(0, 1)):
    """Each process id in ``pids`` evaluates its share of the first ``limit`` questions per hop, as eval does
    (``Engine.evaluate`` writes the shard's metrics.json at the end, as `stem-jax eval` does)."""
    everything = engine.dataset.questions
    selected = [q for h in (1, 2, 3) for q in [q for q in everything if q.hops == h][:limit]]
    engine.dataset.questions = selected
    try:
        for pid in pids:
            engine.evaluate(shard_folder(out, pid, 2), questions=share(selected, pid, 2))
    finally:
        engine.dataset.questions = everything
    return selected


def kill_after(folder, records: int) -> None:
    path = folder / "predictions.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:records]) + lines[records][:7])  # and a torn line, as a SIGKILL leaves


def test_complete_shards_merge_in_split_order(engine, tmp_path):
    selected = run_shards(engine, tmp_path, 2)
    path, info = merge_shards(tmp_path)
    ids = [json.loads(line)["id"] for line in path.read_text().splitlines()]
    assert ids == [q.qid for q in selected] and info["processes"] == 2


def test_rerun_with_larger_limit_and_a_killed_process_is_refused(engine, tmp_path):
    """The issue's case: both shards finished with --limit 2; the rerun with --limit 4 finished process 0 and
    process 1 was killed. Before, score merged 1 + 0.5 shards with rc 0 from the stale metrics.json."""
    run_shards(engine, tmp_path, 2)
    assert (shard_folder(tmp_path, 1, 2) / "metrics.json").exists()
    run_shards(engine, tmp_path, 4)
    kill_after(shard_folder(tmp_path, 1, 2), 3)  # its metrics.json stays: score reads the records, not the report
    with pytest.raises(StemError, match=r"shard-1-of-2 is incomplete: 3 of its 6 questions.*\n.*rerun process 1"):
        merge_shards(tmp_path)
    rc = main(["score", "--out", str(tmp_path)])
    assert rc == 2 and not (tmp_path / "metrics.json").exists()


def test_a_shard_left_from_a_smaller_run_is_refused(engine, tmp_path):
    run_shards(engine, tmp_path, 2)
    run_shards(engine, tmp_path, 4, pids=(0,))  # process 1 never reran: complete, but for --limit 2
    with pytest.raises(StemError, match=r"shard-1-of-2 was last run over another question selection"):
        merge_shards(tmp_path)


def test_an_extra_shard_folder_is_named(engine, tmp_path):
    run_shards(engine, tmp_path, 2)
    (tmp_path / "shard-2-of-2").mkdir()
    with pytest.raises(StemError, match=r"shard-2-of-2 names a process id outside 0..1"):
        merge_shards(tmp_path)
    (tmp_path / "shard-2-of-2").rmdir()
    (tmp_path / "shard-0-of-3").mkdir()
    with pytest.raises(StemError, match=r"different process counts \[2, 3\]"):
        merge_shards(tmp_path)


def test_a_damaged_or_foreign_shard_is_refused(engine, tmp_path):
    run_shards(engine, tmp_path, 2)
    folder = shard_folder(tmp_path, 0, 2)
    path = folder / "predictions.jsonl"
    good = path.read_text()
    path.write_text(good.replace("\n", "\n{oops\n", 1))
    with pytest.raises(StemError, match=r"shard-0-of-2 is incomplete: 1 damaged line"):
        merge_shards(tmp_path)
    path.write_text(good)
    (folder / "run.json").write_text("{")
    with pytest.raises(StemError, match=r"run.json is missing or unreadable.*\n.*rerun process 0"):
        merge_shards(tmp_path)
