"""A run folder that cannot take the final report: one error, the predictions kept.

The failure pinned: ``eval`` computes every question, then ``write_report`` raises PermissionError with a traceback.
Root reads and writes through ``chmod``, so the failure is injected at the write itself.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

import stem_jax.atomic
from stem_jax.cli.main import main
from stem_jax.cli.report import write_report
from stem_jax.errors import StemError

ARGS = ["eval", "--dataset", "demo", "--hops", "1", "--limit", "4", "--encoder.name=hashing", "--no-progress",
        "--engine.batch_precision=32", "--engine.batch_breadth=8"]


def test_a_read_only_report_is_one_error_and_the_run_resumes_to_write_it(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    real = stem_jax.atomic.write_text_atomic

    def read_only(target, text):
        if target.name.startswith("metrics."):
            raise PermissionError(13, "Permission denied", str(target))
        return real(target, text)

    monkeypatch.setattr(stem_jax.atomic, "write_text_atomic", read_only)
    argv = [*ARGS, "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "metrics.json: cannot write the metrics report (Permission denied)" in err, err
    assert "predictions beside it are kept" in err and "Traceback" not in err
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 4
    monkeypatch.undo()
    assert main(argv) == 0  # the same command again: nothing left to compute, the report is written
    assert json.loads((out / "metrics.json").read_text())["overall"]["n"] == 4


def test_reports_are_written_whole_with_a_plain_files_mode(tmp_path):
    paths = write_report(tmp_path / "new", "r", {"a": 1}, "| a |")
    assert json.loads(paths[0].read_text()) == {"a": 1} and paths[1].read_text() == "| a |\n"
    # the atomic write's temp file is owner-only; the report keeps a normal mode (or the one it had)
    assert stat.S_IMODE(os.stat(paths[0]).st_mode) == 0o644
    paths[0].chmod(0o664)
    write_report(tmp_path / "new", "r", {"a": 2}, "| a |")
    assert stat.S_IMODE(os.stat(paths[0]).st_mode) == 0o664
    (tmp_path / "file").write_text("")
    with pytest.raises(StemError, match="cannot write the r report"):
        write_report(tmp_path / "file" / "sub", "r", {}, "")
