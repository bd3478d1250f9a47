"""XLA's persistent compilation cache (stem_jax.compile_cache): where it lives, how it is turned off, its size
limit, that an unwritable folder leaves it off, and that a second process reads it with unchanged predictions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stem_jax import compile_cache


def test_folder_follows_the_cache_root_and_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    assert compile_cache.compile_cache_folder(tmp_path) == tmp_path / compile_cache.FOLDER
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "elsewhere"))
    assert compile_cache.compile_cache_folder(tmp_path) == tmp_path / "elsewhere"
    for off in ("0", "off", "FALSE", "no"):
        monkeypatch.setenv(compile_cache.ENV, off)
        assert compile_cache.compile_cache_folder(tmp_path) is None


def test_an_unwritable_folder_leaves_the_cache_off(tmp_path, monkeypatch):
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    monkeypatch.setattr(compile_cache, "_enabled", None)
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert compile_cache.enable_compile_cache(blocker) is None  # mkdir under a file fails: compiling is slower only
    assert compile_cache._enabled is None


_PRINT_LIMIT = """import sys, jax
from pathlib import Path
from stem_jax.compile_cache import enable_compile_cache
enable_compile_cache(Path(sys.argv[1]))
print(jax.config.jax_compilation_cache_max_size)"""


def test_the_size_limit_is_a_gibibyte_unless_jax_variable_sets_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in (compile_cache.ENV, compile_cache.MAX_BYTES_ENV)}
    limits = []
    for value in (None, "-1"):
        run_env = env if value is None else {**env, compile_cache.MAX_BYTES_ENV: value}
        done = subprocess.run([sys.executable, "-c", _PRINT_LIMIT, str(tmp_path)], env=run_env, capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        limits.append(int(done.stdout.split()[-1]))
    assert limits == [compile_cache.MAX_BYTES, -1]


def _eval(out: Path, cache: Path, compile_dir: Path) -> list[dict]:
    env = {**os.environ, "STEM_CACHE_DIR": str(cache), compile_cache.ENV: str(compile_dir)}
    env.pop(compile_cache.MAX_BYTES_ENV, None)  # the CLI's own 1 GiB limit (tests/conftest.py sets none)
    done = subprocess.run([sys.executable, "-m", "stem_jax.cli.main", "eval", "--dataset", "demo", "--planner", "oracle",
                           "--limit", "12", "--out", str(out), "--no-progress"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    for record in records:
        record.pop("ms")  # timings differ run to run
    return records


@pytest.mark.slow
def test_a_second_process_loads_compiled_programs_and_predicts_the_same(tmp_path):
    compile_dir = tmp_path / "xla"
    first = _eval(tmp_path / "a", tmp_path / "cache", compile_dir)
    entries = sorted(p.name for p in compile_dir.iterdir() if not p.name.startswith("."))
    assert any(name.startswith("jit_trace_batch") for name in entries), entries[:20]
    mtimes = {p: p.stat().st_mtime_ns for p in compile_dir.iterdir()}
    second = _eval(tmp_path / "b", tmp_path / "cache", compile_dir)
    assert second == first
    # the tracers came from the cache: their executables were read (their LRU "-atime" stamps move), not written again
    tracers = [p for p in mtimes if p.name.startswith("jit_trace_batch") and p.name.endswith("-cache")]
    assert tracers and all(p.stat().st_mtime_ns == mtimes[p] for p in tracers)
