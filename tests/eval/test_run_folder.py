"""Run folders: fingerprinted, locked, corrupt-record tolerant."""

import dataclasses
import json
import subprocess
import sys
import warnings

import pytest

from stem_jax.config import StemConfig, apply_overrides
from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.eval.run_folder import (
    FINGERPRINT,
    PREDICTIONS,
    RunFolder,
    RunFolderWarning,
    read_predictions,
    results_fingerprint,
    short_hash,
)


def fingerprint(**changes):
    base = dict(config=StemConfig(), method="stem", planner={"name": "oracle"}, kg="kg-abc", encoder="hashing-v1-dim32",
                data={"dataset": "demo", "split": "test", "questions": None})
    base.update(changes)
    return results_fingerprint(**base)


def record(qid, **extra):
    return {"id": qid, "prediction": ["a"], "scores": [0.5], "ground_truth": ["a"], **extra}


def quiet(_):
    pass


def test_round_trip_and_resume(tmp_path):
    with RunFolder.open(tmp_path / "run", fingerprint(), log=quiet) as run:
        assert run.finished() == {}
        run.append([record("q1"), record("q2")])
        run.append([record("q3")])
    with RunFolder.open(tmp_path / "run", fingerprint(), log=quiet) as run:
        assert list(run.finished()) == ["q1", "q2", "q3"] and run.problems == []
    stored = json.loads((tmp_path / "run" / FINGERPRINT).read_text())
    assert stored["short_hash"] == short_hash(fingerprint())


RESULT_CHANGES = {
    "config.tracer.lam": dict(config=apply_overrides(StemConfig(), {"tracer.lam": "1.2"})),
    "config.tracer.theta": dict(config=apply_overrides(StemConfig(), {"tracer.theta": "0.5"})),
    "config.engine.relation_bonus": dict(config=apply_overrides(StemConfig(), {"engine.relation_bonus": "false"})),
    "config.planner.beam": dict(config=apply_overrides(StemConfig(), {"planner.beam": "2"})),
    "method": dict(method="safe"),
    "planner.name": dict(planner={"name": "pattern"}),
    "kg": dict(kg="kg-other"),
    "encoder": dict(encoder="minilm-l6"),
    "data.split": dict(data={"dataset": "demo", "split": "dev", "questions": None}),
    "data.questions": dict(data={"dataset": "demo", "split": "test", "questions": "sha-of-my-file"}),
}


@pytest.mark.parametrize("key", sorted(RESULT_CHANGES))
def test_rerun_with_other_results_option_is_refused_then_overwrite(tmp_path, key):
    with RunFolder.open(tmp_path / "run", fingerprint(), log=quiet) as run:
        run.append([record("q1")])
    changed = fingerprint(**RESULT_CHANGES[key])
    assert short_hash(changed) != short_hash(fingerprint())
    with pytest.raises(StemError) as err:
        RunFolder.open(tmp_path / "run", changed)
    first, fix = str(err.value).split("\n")
    assert "holds results of a different run" in first and key in first
    assert fix == "  how to fix: pass a new --out, or --overwrite to replace its results"
    assert read_predictions(tmp_path / "run" / PREDICTIONS)[0].keys() == {"q1"}  # nothing lost by refusing
    with RunFolder.open(tmp_path / "run", changed, overwrite=True) as run:
        assert run.finished() == {}
    with RunFolder.open(tmp_path / "run", changed) as run:  # the new fingerprint is now the folder's
        pass


def test_an_earlier_report_stays_until_the_next_run_replaces_it(tmp_path):
    """Reopening a folder keeps the finished run's metrics.json (a killed resume leaves it, not nothing);
    --overwrite drops it with the predictions it describes."""
    with RunFolder.open(tmp_path / "run", fingerprint(), log=quiet) as run:
        run.append([record("q1")])
    (tmp_path / "run" / "metrics.json").write_text('{"overall": {"n": 1}}\n')
    with RunFolder.open(tmp_path / "run", fingerprint(), log=quiet):
        assert json.loads((tmp_path / "run" / "metrics.json").read_text()) == {"overall": {"n": 1}}
    with RunFolder.open(tmp_path / "run", fingerprint(kg="kg-other"), overwrite=True, log=quiet):
        assert not (tmp_path / "run" / "metrics.json").exists()


def test_chunking_option_may_change_on_resume(tmp_path):
    with RunFolder.open(tmp_path / "run", fingerprint(), log=quiet) as run:
        run.append([record("q1")])
    rechunked = fingerprint(config=apply_overrides(StemConfig(), {"engine.chunk_questions": "7"}))
    assert short_hash(rechunked) == short_hash(fingerprint())
    with RunFolder.open(tmp_path / "run", rechunked) as run:
        assert list(run.finished()) == ["q1"]


def test_out_that_is_a_file_is_one_line_error(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(StemError, match=r"^--out .*f is a file, not a run folder\n  how to fix: "):
        RunFolder.open(tmp_path / "f", fingerprint())


def test_predictions_without_fingerprint_are_not_resumed(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / PREDICTIONS).write_text(json.dumps(record("q1")) + "\n")
    with pytest.raises(StemError, match="without a fingerprint"):
        RunFolder.open(tmp_path / "old", fingerprint())
    (tmp_path / "old" / FINGERPRINT).write_text("{broken")
    with pytest.raises(StemError, match="unreadable"):
        RunFolder.open(tmp_path / "old", fingerprint())
    with RunFolder.open(tmp_path / "old", fingerprint(), overwrite=True) as run:
        assert run.finished() == {}


def test_second_writer_in_this_process_is_refused_as_such(tmp_path):
    """It must not blame "another stem-jax process" and give this process's own pid."""
    with RunFolder.open(tmp_path / "run", fingerprint()):
        with pytest.raises(StemError, match=rf"already open in this process \(pid {__import__('os').getpid()}\)"):
            RunFolder.open(tmp_path / "run", fingerprint())
    with RunFolder.open(tmp_path / "run", fingerprint()):  # released on exit
        pass


def test_lock_held_by_another_process(tmp_path):
    script = ("import sys, time; from stem_jax.eval.run_folder import RunFolder; "
              "f = RunFolder.open(sys.argv[1], {'config': {}}); print('locked', flush=True); time.sleep(30)")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "run")], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"locked"
        with pytest.raises(StemError, match=rf"\(pid {proc.pid}\)\n  how to fix: wait for it to finish, or pass another --out"):
            RunFolder.open(tmp_path / "run", {"config": {}})
    finally:
        proc.kill()
        proc.wait()
    with RunFolder.open(tmp_path / "run", {"config": {}}):  # a killed holder's lock is gone with it
        pass


def test_corrupt_torn_duplicate_and_nan_lines_are_reported_and_recomputed(tmp_path):
    with RunFolder.open(tmp_path / "run", fingerprint(), log=quiet) as run:
        run.append([record(f"q{i}") for i in range(5)])
    path = tmp_path / "run" / PREDICTIONS
    lines = path.read_bytes().split(b"\n")[:-1]
    lines[1] = b"\xff{garbage"  # line 2
    lines[3] = json.dumps(record("q0")).encode()  # line 4: a duplicate (two writers)
    lines.insert(4, b'{"id": "q9", "scores": [NaN]}')  # line 5
    path.write_bytes(b"\n".join(lines) + b"\n" + b'{"id": "q4", "predic')  # torn last line
    with pytest.warns(RunFolderWarning) as caught:
        with RunFolder.open(tmp_path / "run", fingerprint()) as run:
            finished = run.finished()
    assert sorted(finished) == ["q0", "q2", "q4"]
    messages = [str(w.message) for w in caught]
    assert any(f"{path}:2: not a JSON record" in m for m in messages)
    assert any(f"{path}:4: duplicate record for question q0" in m for m in messages)
    assert any(f"{path}:5: non-finite number in scores[0]" in m for m in messages)
    assert any(f"{path}:7: torn last line" in m for m in messages)
    assert read_predictions(path, log=None)[1:] == ([], False)  # rewritten cleanly


@pytest.mark.parametrize("literal", ["-Infinity", "Infinity", "1e999", "-2.5e400"])
def test_every_non_finite_spelling_is_found_when_reading(tmp_path, literal):
    """The reader flags NaN/inf while decoding (parse hooks), not by walking every record: each spelling
    JSON decoders turn into a non-finite float, an overflowing literal included, is still caught."""
    path = tmp_path / PREDICTIONS
    path.write_text(json.dumps(record("q1")) + "\n" + f'{{"id": "q2", "ms": {{"trace": {literal}}}}}' + "\n")
    records, problems, rewrite = read_predictions(path, log=None)
    assert sorted(records) == ["q1"] and rewrite
    assert problems == [f"{path}:2: non-finite number in ms.trace; that question is computed again"]


def test_nan_never_reaches_predictions(tmp_path):
    with RunFolder.open(tmp_path / "run", fingerprint()) as run:
        with pytest.raises(StemError, match=r"'q1' holds a non-finite number in scores\[0\]"):
            run.append([record("q1", scores=[float("nan")])])
        with pytest.raises(StemError, match=r"ms.trace"):
            run.append([record("q2", ms={"trace": float("inf")})])
    assert not (tmp_path / "run" / PREDICTIONS).exists() or (tmp_path / "run" / PREDICTIONS).read_text() == ""


def test_changed_question_is_recomputed(tmp_path):
    q = Question("q1", "who directed Kismet", ("Kismet",), ("William Dieterle",), hops=1)
    other = Question("q2", "x", ("Kismet",), ("y",), hops=1)
    with RunFolder.open(tmp_path / "run", fingerprint(), questions=[q, other]) as run:
        assert run.finished() == {}
        run.append([record("q1"), record("q2")])
    assert "question_sha" not in (tmp_path / "run" / PREDICTIONS).read_text()  # records are not altered
    edited = dataclasses.replace(q, answers=("Someone Else",))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunFolderWarning)
        with RunFolder.open(tmp_path / "run", fingerprint(), questions=[edited, other], log=quiet) as run:
            assert list(run.finished()) == ["q2"]


def test_short_hash_is_stable():
    assert short_hash(fingerprint()) == short_hash(fingerprint()) and len(short_hash(fingerprint())) == 8
