"""Run folders keep apart what was made from other inputs.

- The question source (``--questions FILE``, or the ``<split>.jsonl|.txt`` a ``files`` KG supplies)
  is in the run fingerprint and in the default folder name, so the documented "evaluate" and "plain-text
  questions" commands of docs/your-own-kg.md write two folders, not 450 records appended to 450 others.
- The trained pattern planner's content (its default folder included) is in the fingerprint:
  retraining it and rerunning into the same ``--out`` is refused instead of mixing two planners.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path

import pytest

from stem_jax.cli.main import main
from stem_jax.data.registry import DatasetSpec
from stem_jax.eval.run_folder import content_stamp, question_source

REPO = Path(__file__).resolve().parents[2]
HASHING = ["--encoder.name=hashing", "--no-progress", "--engine.batch_precision=32", "--engine.batch_breadth=8"]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exit_:
            rc = exit_.code
    return rc, out.getvalue(), err.getvalue()


def lines(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def demo_kg(tmp_path_factory) -> Path:
    """The documented `python experiments/export_metaqa_generic.py --dataset demo --out runs/demo-kg --plain-text`."""
    spec = importlib.util.spec_from_file_location("export_metaqa_generic", REPO / "experiments" /
                                                  "export_metaqa_generic.py")
    export = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export)
    folder = tmp_path_factory.mktemp("kg") / "demo-kg"
    export.export(None, folder, splits=("train", "test"), plain_text=True, dataset="demo")
    return folder


# ----- the question source -----


def test_question_source_names_the_file_a_files_kg_reads(demo_kg, tmp_path):
    default = question_source(DatasetSpec(name="files", data_dir=demo_kg))
    assert default == {"questions": str((demo_kg / "test.jsonl").resolve())}
    text = question_source(DatasetSpec(name="files", data_dir=demo_kg, questions=demo_kg / "test.txt"))
    assert text == {"questions": str((demo_kg / "test.txt").resolve())}
    assert question_source(DatasetSpec(name="demo")) == {}  # a built-in split: the split says it all
    assert question_source(DatasetSpec(name="metaqa", questions=tmp_path / "q.txt", qtypes=tmp_path / "t.txt")) == {
        "questions": str((tmp_path / "q.txt").resolve()), "qtypes": str((tmp_path / "t.txt").resolve())}
    assert question_source(DatasetSpec(name="rog", rog_path=tmp_path / "cwq")) == {
        "rog_path": str((tmp_path / "cwq").resolve())}


def test_two_question_sources_get_two_default_folders_and_never_mix(demo_kg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    common = ["eval", "--dataset", "files", "--data-dir", str(demo_kg), "--planner", "oracle", "--limit", "3",
              "--cache-dir", str(tmp_path / "cache"), *HASHING]
    rc, _, err = run(*common)
    assert rc == 0, err
    rc, stdout, err = run(*common, "--questions", str(demo_kg / "test.txt"))
    assert rc == 0, err
    assert "resuming" not in stdout
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(folders) == 2, folders
    assert folders[0].startswith("files-demo-kg-test-oracle-")
    assert folders[1].startswith("files-demo-kg-test.txt-oracle-")
    jsonl, text = (lines(tmp_path / "runs" / name) for name in folders)
    assert len(jsonl) == 9 and len(text) == 3  # --limit is per hop; plain-text questions have no hop count
    assert not any(r["id"].startswith("test/") for r in jsonl) and all(r["id"].startswith("test/") for r in text)

    # the same folder with the other source: refused, nothing appended
    first = tmp_path / "runs" / folders[0]
    before = (first / "predictions.jsonl").read_bytes()
    rc, _, err = run(*common, "--questions", str(demo_kg / "test.txt"), "--out", str(first))
    assert rc == 2
    message = err.strip().splitlines()
    assert "holds results of a different run" in message[0] and "data.questions" in message[0]
    assert "test.jsonl" in message[0] and "test.txt" in message[0]  # the file names tell the two apart
    assert message[-1] == "  how to fix: pass a new --out, or --overwrite to replace its results"
    assert (first / "predictions.jsonl").read_bytes() == before


# ----- the default pattern planner's content -----


def test_content_stamp_sees_same_sized_edits_and_ignores_locks_and_temporaries(tmp_path):
    folder = tmp_path / "planner"
    folder.mkdir()
    (folder / "planner.json").write_text('{"a": 1}')
    (folder / "arrays.npz").write_bytes(b"\x00" * 64)
    stamp = content_stamp(folder)
    (folder / ".lock").write_text("123")
    (folder / "arrays.tmp.npz").write_bytes(b"half")
    assert content_stamp(folder) == stamp
    (folder / "arrays.npz").write_bytes(b"\x00" * 63 + b"\x01")  # same size, same names
    assert content_stamp(folder) != stamp
    assert content_stamp(tmp_path / "none") == {"path": str(tmp_path / "none"), "exists": False}


def test_retraining_the_default_planner_then_resuming_is_refused(tmp_path):
    common = ["--dataset", "demo", "--cache-dir", str(tmp_path / "cache"), *HASHING]
    train = ["train-planner", *common, "--limit", "40", "--no-answer-scorer"]
    assert run(*train, "--epochs", "3")[0] == 0  # into the default folder <cache>/demo/planners/pattern-hashing
    evaluate = ["eval", *common, "--planner", "pattern", "--limit", "2", "--out", str(tmp_path / "run")]
    rc, _, err = run(*evaluate)
    assert rc == 0, err
    stored = json.loads((tmp_path / "run" / "fingerprint.json").read_text())["fingerprint"]
    planner_folder = tmp_path / "cache" / "demo" / "planners" / "pattern-hashing"
    assert stored["planner"]["content"] == json.loads(json.dumps(content_stamp(planner_folder)))
    before = (tmp_path / "run" / "predictions.jsonl").read_bytes()

    assert run(*train, "--epochs", "4")[0] == 0  # retrained in place, same file names
    rc, _, err = run(*evaluate)
    assert rc == 2
    assert "holds results of a different run" in err and "planner.content.sha256" in err
    assert (tmp_path / "run" / "predictions.jsonl").read_bytes() == before
