"""`stem-jax eval` as a new user meets it: one-line errors, never a traceback, nothing lost.

Runs the real CLI in-process on a tiny MetaQA-format KB with the hashing encoder, so the tracer
compiles once for the whole module.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fuzz_inputs import DIRECTOR, FILMS, KB_LINES, expected_question_skips, question_file
from hypothesis import HealthCheck, given, settings

from stem_jax.cli.main import build_parser, main
from stem_jax.eval.run_folder import RunFolder

FLAGS = ["--dataset", "metaqa", "--planner", "oracle", "--encoder.name=hashing", "--no-progress"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    (root / "kb.txt").write_text("\n".join(KB_LINES) + "\n")
    (root / "kb2.txt").write_text("\n".join(KB_LINES) + "\nFilm 0|has_genre|Comedy\n")
    lines = [f"who directed [{film}]\t{DIRECTOR[film]}" for film in FILMS]
    (root / "q.txt").write_text("\n".join(lines) + "\n")
    (root / "t.txt").write_text("movie_to_director\n" * len(lines))
    return root


def stem(data: Path, *argv: str, cache: Path | None = None) -> tuple[int, str, str]:
    """Run ``stem-jax eval`` in-process; (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    args = ["eval", *FLAGS, "--kb", str(data / "kb.txt"), "--questions", str(data / "q.txt"),
            "--qtypes", str(data / "t.txt"), "--cache-dir", str(cache or data / "cache"), *argv]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(args)
        except SystemExit as exit_:  # argparse errors
            rc = exit_.code
    assert "Traceback" not in err.getvalue() + out.getvalue()
    return rc, out.getvalue(), err.getvalue()


def predictions(folder: Path) -> dict[str, dict]:
    records = {}
    for line in (folder / "predictions.jsonl").read_text().splitlines():
        record = json.loads(line)
        record.pop("ms")
        records[record["id"]] = record
    return records


def error_lines(stderr: str) -> list[str]:
    lines = stderr.strip().splitlines()
    assert lines[0].startswith("stem-jax eval: error: ") and lines[-1].startswith("  how to fix: "), stderr
    return lines


@pytest.fixture(scope="module")
def baseline(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "base"
    rc, stdout, _ = stem(data, "--out", str(out))
    assert rc == 0 and "| all | 12 | 100" in stdout
    return out


# ----- row 1: a rerun with other settings is refused, key by key -----

RESULT_OPTIONS = {
    "config.tracer.lam": ["--tracer.lam=1.2"],
    "config.tracer.theta": ["--tracer.theta=0.5"],
    "config.tracer.tau": ["--tracer.tau=0.1"],
    "config.engine.relation_bonus": ["--engine.relation_bonus=false"],
    "config.engine.answer_cut": ["--engine.answer_cut=0.9"],
    "config.planner.beam": ["--planner.beam=2"],
    "config.seed": ["--seed=3"],
    "kg": ["--kb", "KB2"],
    "data.split": ["--split", "dev"],
}


@pytest.mark.parametrize("key", sorted(RESULT_OPTIONS))
def test_rerun_with_a_different_results_option_is_refused(data, baseline, key):
    before = (baseline / "predictions.jsonl").read_bytes()
    argv = [str(data / "kb2.txt") if a == "KB2" else a for a in RESULT_OPTIONS[key]]
    rc, _, stderr = stem(data, "--out", str(baseline), *argv)
    assert rc == 2
    first, fix = error_lines(stderr)
    assert "holds results of a different run" in first and f"{key}:" in first
    assert fix == "  how to fix: pass a new --out, or --overwrite to replace its results"
    assert (baseline / "predictions.jsonl").read_bytes() == before


def test_same_settings_resume_and_chunking_may_change(data, baseline):
    rc, stdout, _ = stem(data, "--out", str(baseline), "--engine.chunk_questions=3")
    assert rc == 0 and "resuming: 12 of 12" in stdout


def test_overwrite_recomputes_like_a_fresh_folder(data, tmp_path):
    stem(data, "--out", str(tmp_path / "a"))
    rc, _, _ = stem(data, "--out", str(tmp_path / "a"), "--tracer.lam=1.2", "--overwrite")
    assert rc == 0
    stem(data, "--out", str(tmp_path / "b"), "--tracer.lam=1.2")
    assert predictions(tmp_path / "a") == predictions(tmp_path / "b")


def test_default_folder_names_carry_a_settings_hash(data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert stem(data)[0] == 0 and stem(data, "--tracer.lam=1.2")[0] == 0
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(folders) == 2 and all(re.fullmatch(r"metaqa-q.txt-oracle-[0-9a-f]{8}", f) for f in folders)


# ----- rows 8-10: --out is a file, corrupt predictions, two writers -----


def test_out_that_is_a_file_fails_before_loading(data, tmp_path):
    (tmp_path / "f").write_text("x")
    rc, stdout, stderr = stem(data, "--out", str(tmp_path / "f"))
    assert rc == 2 and stdout == "" and "is a file, not a folder" in error_lines(stderr)[0]


def test_corrupt_middle_line_is_reported_and_recomputed(data, baseline, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    for name in ("fingerprint.json", "predictions.jsonl"):
        (out / name).write_bytes((baseline / name).read_bytes())
    lines = (out / "predictions.jsonl").read_bytes().split(b"\n")
    lines[2] = b'{"id": "q.txt/3", "predic\xff'
    (out / "predictions.jsonl").write_bytes(b"\n".join(lines))
    rc, stdout, stderr = stem(data, "--out", str(out))
    assert rc == 0 and "predictions.jsonl:3: not a JSON record; that question is computed again" in stdout + stderr
    assert predictions(out) == predictions(baseline)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kill_at_a_random_byte_resumes_to_identical_outputs(data, baseline, tmp_path, seed):
    """What SIGKILL leaves behind is a prefix of the file: cut it anywhere, resume, compare."""
    out = tmp_path / "run"
    out.mkdir()
    body = (baseline / "predictions.jsonl").read_bytes()
    cut = int(np.random.default_rng(seed).integers(0, len(body)))
    (out / "fingerprint.json").write_bytes((baseline / "fingerprint.json").read_bytes())
    (out / "predictions.jsonl").write_bytes(body[:cut])
    assert stem(data, "--out", str(out))[0] == 0
    assert predictions(out) == predictions(baseline)


def test_second_writer_is_refused_with_the_holder_pid(data, baseline):
    with RunFolder.open(baseline, json.loads((baseline / "fingerprint.json").read_text())["fingerprint"]):
        rc, _, stderr = stem(data, "--out", str(baseline))
    # the holder is this very process here (another process: tests/eval/test_run_folder.py), and it says so
    assert rc == 2 and f"already open in this process (pid {os.getpid()})" in error_lines(stderr)[0]


# ----- rows 5-7, 11-15: settings, flags and selections -----


@pytest.mark.parametrize(("argv", "message"), [
    (["--engine.frontier=0", "--tracer.theta=nan"], "2 settings are out of range"),
    (["--engine.batch_precision=1000000"], "--engine.batch_precision=1000000: expected an integer <= 16384"),
    (["--planner.beam=0"], "1 setting is out of range"),
])
def test_bad_settings_are_errors_before_any_work(data, argv, message):
    rc, stdout, stderr = stem(data, *argv)
    assert rc == 2 and stdout == "" and message in stderr and "Traceback" not in stderr


def test_abbreviated_option_is_rejected(data):
    rc, _, stderr = stem(data, "--tracer.la=2")
    assert rc == 2 and "unrecognized arguments: --tracer.la=2" in stderr


def test_empty_question_file_is_an_error(data, tmp_path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "t.txt").write_text("")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["eval", *FLAGS, "--kb", str(data / "kb.txt"), "--questions", str(tmp_path / "empty.txt"),
                   "--qtypes", str(tmp_path / "t.txt"), "--cache-dir", str(tmp_path / "c")])
    assert rc == 2 and "no usable questions" in err.getvalue()


def test_bench_trace_writes_under_runs_unless_recorded():
    args = build_parser().parse_args(["bench", "trace"])
    assert args.out is None and not args.record
    assert build_parser().parse_args(["bench", "trace", "--record"]).record


# ----- fuzzed question files through the whole pipeline -----

TRIED = {"eval": 0}


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(generated=question_file(max_size=8))
def test_fuzzed_question_files_through_eval(data, tmp_path_factory, generated):
    TRIED["eval"] += 1
    kinds, body, qtypes = generated
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "q.txt").write_bytes(body)
    n_lines = len(body.split(b"\n")) - (1 if body.endswith(b"\n") or not body else 0)
    (folder / "t.txt").write_bytes(qtypes if qtypes is not None else b"movie_to_director\n" * n_lines)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(["eval", *FLAGS, "--kb", str(data / "kb.txt"), "--questions", str(folder / "q.txt"),
                   "--qtypes", str(folder / "t.txt"), "--cache-dir", str(data / "cache"), "--out", str(folder / "run")])
    assert "Traceback" not in err.getvalue()
    if "valid" not in kinds:
        assert rc == 2 and "no usable questions" in err.getvalue()
        return
    assert rc == 0, err.getvalue()
    metrics = json.loads((folder / "run" / "metrics.json").read_text())
    assert metrics["dataset_skips"] == dict(expected_question_skips(kinds))
    assert metrics["overall"]["n"] == kinds.count("valid")


# ----- a real SIGKILL mid-eval (slow: a subprocess compiles the tracer) -----

KILL_SCRIPT = "import sys; from stem_jax.cli.main import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.slow
def test_sigkill_mid_eval_then_resume_gives_identical_outputs(data, tmp_path):
    lines = [f"who directed [{film}]\t{DIRECTOR[film]}" for film in FILMS] * 50  # 600 questions
    (tmp_path / "q.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "t.txt").write_text("movie_to_director\n" * len(lines))
    argv = ["eval", *FLAGS, "--kb", str(data / "kb.txt"), "--questions", str(tmp_path / "q.txt"),
            "--qtypes", str(tmp_path / "t.txt"), "--cache-dir", str(data / "cache"), "--engine.chunk_questions=4"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([*argv, "--out", str(tmp_path / "clean")]) == 0
    rng = np.random.default_rng(0)
    killed = tmp_path / "killed"
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, *argv, "--out", str(killed)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        began = time.perf_counter()
        while proc.poll() is None and not (killed / "predictions.jsonl").exists() and time.perf_counter() - began < 300:
            time.sleep(0.05)
        time.sleep(float(rng.uniform(0.0, 0.3)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([*argv, "--out", str(killed)]) == 0
    assert predictions(killed) == predictions(tmp_path / "clean")


# ----- an unwritable --cache-dir / --out is a one-line error, and finished work is kept -----


def test_cache_dir_naming_a_file_is_an_error(data, tmp_path):
    (tmp_path / "file").write_text("x")
    rc, _, stderr = stem(data, "--out", str(tmp_path / "out"), cache=tmp_path / "file")
    assert rc == 2 and "--cache-dir" in error_lines(stderr)[0] and "is a file, not a folder" in stderr
    rc, _, stderr = stem(data, "--out", str(tmp_path / "out"), cache=tmp_path / "file" / "sub")
    assert rc == 2 and "is a file, not a folder" in error_lines(stderr)[0]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_out_at_start_is_an_error(data, tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        rc, _, stderr = stem(data, "--out", str(out))
    finally:
        out.chmod(0o755)
    assert rc == 2 and "cannot write the run folder" in error_lines(stderr)[0]


class _ReadOnlySink:
    def write(self, _):
        raise OSError(30, "Read-only file system")

    def close(self):
        pass


def test_out_becoming_unwritable_mid_run_is_an_error_and_keeps_finished_work(data, baseline, tmp_path, monkeypatch):
    out = tmp_path / "run"
    original = RunFolder.append
    calls = []

    def append(self, records):
        calls.append(len(records))
        if len(calls) == 2:  # the folder turns read-only after the first chunk was written
            self._sink = _ReadOnlySink()
        return original(self, records)

    monkeypatch.setattr(RunFolder, "append", append)
    rc, _, stderr = stem(data, "--out", str(out), "--engine.chunk_questions=4")
    lines = error_lines(stderr)
    assert rc == 2 and len(lines) == 2 and "cannot write the finished questions (Read-only file system)" in lines[0]
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 4  # the first chunk is kept
    monkeypatch.setattr(RunFolder, "append", original)
    rc, stdout, _ = stem(data, "--out", str(out))
    assert rc == 0 and "resuming: 4 of 12" in stdout and predictions(out) == predictions(baseline)
