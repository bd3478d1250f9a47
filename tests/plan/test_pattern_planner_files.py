"""A trained pattern planner is saved as one unit, locked while written, and refused when damaged.

The failures pinned: two ``train-planner`` into one folder shared ``arrays.tmp.npz`` (one crashed, the other saved a
file with a bad CRC); ``save`` replaced ``arrays.npz`` before ``planner.json``, so a kill between them left
a mismatched pair that loaded silently (MetaQA Hit@1 96.7 -> 6.7); a truncated, flipped or deleted file
raised a traceback. Each damaged form must be one error naming the file and the fix (retrain).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from stem_jax.cli.main import main
from stem_jax.config import EncoderConfig
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.encoder import get_encoder
from stem_jax.errors import StemError
from stem_jax.plan import pattern
from stem_jax.plan.pattern import PatternPlanner, TrainConfig, planner_lock, train_pattern_planner

CONFIG = TrainConfig(epochs=2, hidden=32, augment=1)


def _train(seed: int, questions) -> PatternPlanner:
    encoder = get_encoder(EncoderConfig(name="hashing"))
    return train_pattern_planner(questions, questions[:10], encoder, config=TrainConfig(**{**CONFIG.__dict__,
                                                                                          "seed": seed}),
                                 log=lambda _: None)


@pytest.fixture(scope="module")
def trained() -> tuple[PatternPlanner, PatternPlanner, PatternPlanner]:
    questions = load_dataset(DatasetSpec("demo", split="train")).questions[::6]
    one_hop = [q for q in questions if q.hops == 1]
    # two runs over the same data (same templates, other weights) and one over other data (other templates)
    return _train(0, questions), _train(1, questions), _train(0, one_hop)


def _saved(planner: PatternPlanner, folder: Path) -> Path:
    planner.save(folder)
    return folder


def _arrays(folder: Path) -> Path:
    (found,) = folder.glob("arrays*.npz")
    return found


def _load_error(folder: Path) -> str:
    with pytest.raises(StemError) as err:
        PatternPlanner.load(folder)
    return str(err.value)


def test_round_trip_names_its_arrays_by_hash(trained, tmp_path):
    planner = trained[0]
    folder = _saved(planner, tmp_path / "p")
    meta = json.loads((folder / "planner.json").read_text())
    assert meta["format_version"] == 2 and meta["arrays"] == _arrays(folder).name
    loaded = PatternPlanner.load(folder)
    assert loaded.templates == planner.templates
    np.testing.assert_array_equal(loaded.params["template"]["kernel"], planner.params["template"]["kernel"])
    _saved(trained[1], folder)  # saving again replaces the pair and removes the old arrays
    assert len(list(folder.glob("arrays*.npz"))) == 1 and not list(folder.glob("*.tmp*"))


@pytest.mark.parametrize("damage", ["truncate arrays", "flip arrays", "delete arrays", "delete planner.json",
                                    "torn planner.json", "planner.json not an object", "empty arrays"])
def test_damaged_planner_files_are_one_error_naming_the_file(trained, tmp_path, damage):
    folder = _saved(trained[0], tmp_path / "p")
    arrays, meta = _arrays(folder), folder / "planner.json"
    data = arrays.read_bytes()
    if damage == "truncate arrays":
        arrays.write_bytes(data[: len(data) // 2])
    elif damage == "flip arrays":
        arrays.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    elif damage == "delete arrays":
        arrays.unlink()
    elif damage == "delete planner.json":
        meta.unlink()
    elif damage == "torn planner.json":
        meta.write_text(meta.read_text()[:200])
    elif damage == "planner.json not an object":
        meta.write_text("[1, 2]\n")
    else:
        arrays.write_bytes(b"")
    message = _load_error(folder)
    named = meta if "planner.json" in damage else arrays
    assert str(named) in message and "train-planner" in message, message
    assert "Traceback" not in message


def test_a_mixed_pair_is_refused(trained, tmp_path):
    """planner.json of one training run beside the arrays of another: by hash, and by shape for format 1."""
    first, second = _saved(trained[0], tmp_path / "a"), _saved(trained[1], tmp_path / "b")
    _arrays(first).unlink()
    (first / _arrays(second).name).write_bytes(_arrays(second).read_bytes())
    meta = json.loads((first / "planner.json").read_text())
    meta["arrays"] = _arrays(second).name  # the file name matches: only the recorded hash tells them apart
    (first / "planner.json").write_text(json.dumps(meta))
    assert "sha256" in _load_error(first)

    # format 1 (before this fix, the shipped MetaQA planner) recorded no hash: shapes still catch other templates
    legacy = _saved(trained[2], tmp_path / "legacy")
    meta = json.loads((legacy / "planner.json").read_text())
    meta.update(format_version=1)
    meta.pop("arrays"), meta.pop("arrays_sha256")
    (legacy / "planner.json").write_text(json.dumps(meta))
    _arrays(legacy).rename(legacy / "arrays.npz")
    assert len(PatternPlanner.load(legacy).templates) == len(trained[2].templates)  # format 1 still loads
    (legacy / "arrays.npz").write_bytes(_arrays(second).read_bytes())
    message = _load_error(legacy)
    assert "different training runs" in message and "arrays.npz" in message


def test_a_kill_between_the_two_writes_keeps_the_old_planner(trained, tmp_path, monkeypatch):
    folder = _saved(trained[0], tmp_path / "p")
    before = _arrays(folder).read_bytes()

    def killed(target, text):
        raise KeyboardInterrupt  # the process dies after the arrays, before planner.json

    import stem_jax.atomic

    monkeypatch.setattr(stem_jax.atomic, "write_text_atomic", killed)
    with pytest.raises(KeyboardInterrupt):
        trained[1].save(folder)
    monkeypatch.undo()
    loaded = PatternPlanner.load(folder)  # the old pair, whole: planner.json still names the old arrays
    np.testing.assert_array_equal(loaded.params["template"]["kernel"], trained[0].params["template"]["kernel"])
    assert (folder / json.loads((folder / "planner.json").read_text())["arrays"]).read_bytes() == before


def test_a_second_writer_is_refused_while_the_first_holds_the_folder(trained, tmp_path, capsys):
    folder = tmp_path / "p"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from stem_jax.plan.pattern import planner_lock\n"
        f"with planner_lock(Path({str(folder)!r})):\n    print('held', flush=True); time.sleep(60)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StemError, match=f"pid {holder.pid}"):
            trained[0].save(folder)
        argv = ["train-planner", "--dataset", "demo", "--encoder.name=hashing", "--cache-dir", str(tmp_path / "c"),
                "--no-progress", "--limit", "20", "--epochs", "1", "--no-answer-scorer", "--out", str(folder)]
        began = time.perf_counter()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"pid {holder.pid}" in err and "--out" in err and "Traceback" not in err
        assert time.perf_counter() - began < 30  # refused before training, not after
    finally:
        holder.kill()
        holder.wait()
    assert main(argv) == 0  # released: the next writer saves a planner that loads
    assert PatternPlanner.load(folder).templates


def test_the_lock_is_reentrant_in_one_thread(trained, tmp_path):
    folder = tmp_path / "p"
    with planner_lock(folder):
        trained[0].save(folder)  # save inside the command's own lock
        assert pattern._HELD
    assert not pattern._HELD and PatternPlanner.load(folder)


def test_missing_planner_hint_for_a_files_kg_names_valid_flags(tmp_path, capsys):
    from test_opaque_ids_planners import write_opaque_kg

    folder = write_opaque_kg(tmp_path / "okg")
    argv = ["eval", "--dataset", "files", "--data-dir", str(folder), "--encoder.name=hashing", "--cache-dir",
            str(tmp_path / "c"), "--no-progress", "--planner", "pattern", "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--dataset files " in err and "--dataset files-okg" not in err, err


def test_two_train_planner_processes_on_one_folder_give_one_planner_and_at_most_one_refusal(tmp_path):
    """The issue's race for real: both start together; the loser (if they overlap) is refused with the
    winner's pid, never a crash or a damaged file, and what is left in the folder loads."""
    folder = tmp_path / "p"
    argv = ["train-planner", "--dataset", "demo", "--encoder.name=hashing", "--no-progress", "--limit", "60",
            "--epochs", "20", "--no-answer-scorer", "--out", str(folder)]
    code = "import sys; from stem_jax.cli.main import main; sys.exit(main(sys.argv[1:]))"
    procs = [subprocess.Popen([sys.executable, "-c", code, *argv, "--cache-dir", str(tmp_path / f"c{i}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    results = [(p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for p in procs]
    codes = sorted(rc for rc, _, _ in results)
    assert codes in ([0, 0], [0, 2]), results
    for rc, _, err in results:
        assert "Traceback" not in err
        if rc == 2:
            assert "pattern planner folder" in err and "in use by another stem-jax process" in err and "pid" in err
    assert PatternPlanner.load(folder).templates
    assert len(list(folder.glob("arrays*.npz"))) == 1 and not list(folder.glob("*.tmp*"))
