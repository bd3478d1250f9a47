"""``eval --workers N``: local worker processes whose shards merge into the one-process run, bit for bit."""

from __future__ import annotations

import json

import pytest

from stem_jax.cli.main import main
from stem_jax.cli.workers import parse_workers, without_workers
from stem_jax.devices import host_cores
from stem_jax.errors import StemError

EVAL = ["eval", "--dataset", "demo", "--hops", "2,3", "--limit", "6", "--encoder.name=hashing", "--no-progress",
        "--engine.chunk_questions=4"]


def _records(path):
    rows = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        record.pop("ms", None)  # timings
        record.pop("question_sha", None)  # a run-folder stamp
        rows.append(record)
    return rows


def test_worker_counts_parse_and_bad_ones_say_how_to_fix():
    assert parse_workers("1") == 1 and parse_workers(3) == 3
    assert parse_workers("auto") == host_cores()
    for bad in ("0", "-2", "two", "1.5"):
        with pytest.raises(StemError, match="how to fix: --workers 2"):
            parse_workers(bad)


def test_worker_flag_is_dropped_from_the_workers_command_line():
    argv = ["eval", "--workers", "2", "--dataset", "demo", "--workers=auto", "--limit", "3"]
    assert without_workers(argv) == ["eval", "--dataset", "demo", "--limit", "3"]


def test_workers_and_num_processes_together_are_refused(tmp_path, capsys):
    code = main([*EVAL, "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache"),
                 "--workers", "2", "--num-processes", "2"])
    assert code == 2
    assert "--num-processes is for processes you start yourself" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_bad_worker_share_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([*EVAL, "--out", str(tmp_path / "run"), "--worker-share", "2/2"])
    assert "expected 0 <= I < N" in capsys.readouterr().err


@pytest.mark.slow  # ~8 s: a worker process starts its own interpreter and engine
def test_two_workers_merge_into_the_one_process_predictions_and_resume(tmp_path, capsys):
    cache = ["--cache-dir", str(tmp_path / "cache")]
    assert main([*EVAL, *cache, "--out", str(tmp_path / "one")]) == 0
    assert main([*EVAL, *cache, "--out", str(tmp_path / "two"), "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "merged 2 complete shards (12 questions)" in out
    assert [len(_records(tmp_path / "two" / f"shard-{i}-of-2" / "predictions.jsonl")) for i in (0, 1)] == [6, 6]
    single = _records(tmp_path / "one" / "predictions.jsonl")
    assert _records(tmp_path / "two" / "predictions.jsonl") == single
    merged = json.loads((tmp_path / "two" / "metrics.json").read_text())
    alone = json.loads((tmp_path / "one" / "metrics.json").read_text())
    assert merged["overall"] == alone["overall"]
    # the same command again: every shard is complete, nothing is traced again, the merge is the same
    assert main([*EVAL, *cache, "--out", str(tmp_path / "two"), "--workers", "2"]) == 0
    assert _records(tmp_path / "two" / "predictions.jsonl") == single
