"""A read-only cache: eval over a complete cache still answers (schema texts in memory), and a
write that the OS refuses anywhere in a command is one line naming the path, not a traceback."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

import stem_jax.methods.stem.resources as resources_module
from stem_jax.cli.main import main


def _eval(tmp_path: Path, cache: Path, out: str) -> int:
    return main(["eval", "--dataset", "demo", "--encoder.name=hashing", "--limit", "4", "--no-progress",
                 "--cache-dir", str(cache), "--out", str(tmp_path / out)])


def test_eval_on_a_read_only_schema_text_cache_encodes_in_memory(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    assert _eval(tmp_path, cache, "writable") == 0
    expected = (tmp_path / "writable" / "predictions.jsonl").read_text().splitlines()

    def read_only(folder, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(folder))

    monkeypatch.setattr(resources_module, "open_or_build", read_only)
    assert _eval(tmp_path, cache, "read-only") == 0
    assert "is not writable (Read-only file system); encoding" in capsys.readouterr().err
    got = (tmp_path / "read-only" / "predictions.jsonl").read_text().splitlines()
    strip = ("ms",)
    assert [{k: v for k, v in json.loads(x).items() if k not in strip} for x in got] == \
        [{k: v for k, v in json.loads(x).items() if k not in strip} for x in expected]


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.ENOSPC])
def test_an_unwritable_path_is_one_error_line(tmp_path, monkeypatch, capsys, code):
    def refuse(*args, **kwargs):
        raise OSError(code, "refused by the test", str(tmp_path / "cache" / "somewhere"))

    monkeypatch.setattr(resources_module.StemResources, "embed_texts", refuse)
    assert _eval(tmp_path, tmp_path / "cache", "out") == 2
    err = capsys.readouterr().err
    assert "error: cannot write " in err and "somewhere" in err and "how to fix" in err
    assert "Traceback" not in err


def test_other_os_errors_still_raise(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(resources_module.StemResources, "embed_texts", broken)
    with pytest.raises(OSError):
        _eval(tmp_path, tmp_path / "cache", "out")
