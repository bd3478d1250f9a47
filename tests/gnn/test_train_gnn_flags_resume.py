"""`train-gnn` checks its flags, refuses to resume with other settings, survives a
damaged checkpoint or model.json with a one-line error (resume falls back to the last good step), and
two runs on one output give one result and one clear refusal."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import shutil
import subprocess
import sys

import pytest
from gnn_cases import train_on_demo

from stem_jax.cli.main import main
from stem_jax.errors import StemError
from stem_jax.gnn.checkpoint import CHECKPOINTS, MODEL_FILE, load_checkpoint
from stem_jax.gnn.train import TrainConfig, train

# the tiny architecture of tests/gnn/test_gnn_train.py (one compile per process)
CONFIG = TrainConfig(steps=8, graphs_per_step=4, lr=1e-2, warmup=1, synthetic_ratio=0.0, val_questions=4,
                     val_every=8, ckpt_every=4)


def cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(list(argv))
        except SystemExit as exit_:
            rc = exit_.code
    assert "Traceback" not in err.getvalue()
    return rc, err.getvalue()


@pytest.mark.parametrize(("flags", "message"), [
    (["--lr", "nan"], "--lr nan: expected a finite number > 0"),
    (["--lr", "inf"], "--lr inf: expected a finite number > 0"),
    (["--lr", "0"], "--lr 0.0: expected a finite number > 0"),
    (["--steps", "-5"], "--steps -5: expected an integer >= 1"),
    (["--val-percent", "-3"], "--val-percent -3: expected an integer in [0, 99]"),
    (["--val-percent", "100"], "--val-percent 100: expected an integer in [0, 99]"),
    (["--synthetic-ratio", "2"], "--synthetic-ratio 2.0: expected a number in [0, 1]"),
    (["--synthetic-ratio", "nan"], "--synthetic-ratio nan: expected a number in [0, 1]"),
    (["--graphs-per-step", "0"], "--graphs-per-step 0: expected an integer >= 1"),
    (["--ckpt-every", "0"], "--ckpt-every 0: expected an integer >= 1"),
    (["--val-every", "0"], "--val-every 0: expected an integer >= 1"),
])
def test_train_gnn_flags_are_checked_before_any_work(flags, message, tmp_path):
    rc, err = cli("train-gnn", "--dataset", "demo", "--encoder.name=hashing", "--no-progress",
                  "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache"), *flags)
    assert rc == 2 and message in err and "nothing was run" in err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return train_on_demo(tmp_path_factory, CONFIG, log=lambda _: None)


def run(setup, out, config=CONFIG, **kwargs):
    return train(setup["factory"], setup["pairs"], setup["pairs"], setup["spec"], config, out, show_progress=False,
                 **kwargs)


@pytest.mark.parametrize(("change", "message"), [
    ({"lr": 2e-2}, r"--lr 0.01 \(this command: 0.02\)"),
    ({"graphs_per_step": 2}, r"--graphs-per-step 4 \(this command: 2\)"),
    ({"synthetic_ratio": 0.5}, r"--synthetic-ratio 0.0 \(this command: 0.5\)"),
])
def test_resuming_with_other_settings_is_refused(setup, tmp_path, change, message):
    out = tmp_path / "run"
    run(setup, out, stop_at=4, log=lambda _: None)
    before = (out / MODEL_FILE).read_text()
    with pytest.raises(StemError, match=message + r".*\n  how to fix: rerun with the run's own values"):
        run(setup, out, dataclasses.replace(CONFIG, **change), log=lambda _: None)
    assert (out / MODEL_FILE).read_text() == before  # model.json never claims the refused values


def _damage_step(out, step: int) -> None:
    files = sorted(p for p in (out / CHECKPOINTS / str(step)).rglob("*") if p.is_file() and p.stat().st_size > 64)
    for path in files:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])  # truncated


def test_damaged_latest_checkpoint_is_one_line_and_resume_falls_back(setup, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(setup["dir"], out)
    (out / ".lock").unlink(missing_ok=True)
    _damage_step(out, 8)
    with pytest.raises(StemError) as err:
        load_checkpoint(out)
    first, fix = str(err.value).split("\n")
    assert "checkpoints/8: the checkpoint is damaged" in first and "resumes from the last good checkpoint" in fix
    lines: list[str] = []
    summary = run(setup, out, log=lines.append)
    assert any("checkpoint step 8" in line and "damaged" in line for line in lines)
    assert any("resuming from checkpoint step 4" in line for line in lines)
    assert summary["params_sha"] == setup["full"]["params_sha"]  # as if never damaged
    assert load_checkpoint(out)[2]["params_sha"] == setup["full"]["params_sha"]
    assert list((out / "damaged-checkpoints").iterdir())  # kept aside, not deleted


@pytest.mark.parametrize("content", ["", "{", "[]", '{"spec": {"layers": "x"}}', '{"spec": 3}'])
def test_damaged_model_file_is_one_line(setup, tmp_path, content):
    out = tmp_path / "run"
    shutil.copytree(setup["dir"], out)
    (out / ".lock").unlink(missing_ok=True)
    (out / MODEL_FILE).write_text(content)
    with pytest.raises(StemError, match=r"model.json: damaged .*\n  how to fix: "):
        load_checkpoint(out)
    with pytest.raises(StemError, match=r"model.json|another architecture"):
        run(setup, out, log=lambda _: None)


def test_second_train_gnn_on_one_output_is_refused(setup, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    script = ("import sys, time; from stem_jax.eval.run_folder import lock_folder; lock_folder(sys.argv[1]); "
              "print('locked', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", script, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StemError, match=rf"in use by another stem-jax process \(pid {holder.pid}\)"):
            run(setup, out, log=lambda _: None)
        assert not (out / MODEL_FILE).exists()
    finally:
        holder.kill()
        holder.wait()
    summary = run(setup, out, log=lambda _: None)  # the lock went with its holder
    assert summary["params_sha"] == setup["full"]["params_sha"]
    assert json.loads((out / MODEL_FILE).read_text())["train"]["lr"] == CONFIG.lr
