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


def _programs(folder: Path, n: int, size: int = 100) -> None:
    """n programs and their access-time records, program-0 the newest; sparse files, so a size is free."""
    for age in range(n):
        program, atime = folder / f"program-{age}-cache", folder / f"program-{age}-atime"
        with program.open("wb") as out:
            out.truncate(size)
        atime.write_bytes(b"t")
        for path in (program, atime):
            os.utime(path, ns=(10**18 - age * 10**9, 10**18 - age * 10**9))


def test_prune_keeps_a_folder_within_budget_and_drops_the_oldest_to_half(tmp_path):
    _programs(tmp_path, 10)
    assert compile_cache.prune_compile_cache(tmp_path, max_bytes=1000) == 0
    assert len(list(tmp_path.glob("*-cache"))) == 10  # within budget: untouched
    assert compile_cache.prune_compile_cache(tmp_path, max_bytes=900) == 600
    assert sorted(p.name for p in tmp_path.glob("*-cache")) == [f"program-{age}-cache" for age in range(4)]
    assert sorted(p.name for p in tmp_path.glob("*-atime")) == [f"program-{age}-atime" for age in range(4)]
    assert compile_cache.prune_compile_cache(tmp_path / "absent", max_bytes=1) == 0  # no folder yet


def test_a_read_recorded_by_jax_keeps_an_old_program(tmp_path):
    _programs(tmp_path, 4)
    os.utime(tmp_path / "program-3-atime", ns=(10**18 + 1, 10**18 + 1))  # written first, read last
    compile_cache.prune_compile_cache(tmp_path, max_bytes=300)
    assert [p.name for p in tmp_path.glob("*-cache")] == ["program-3-cache"]  # not program-0, the newest written


def test_opening_prunes_once_and_leaves_jax_without_a_limit_unless_its_variable_sets_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in (compile_cache.ENV, compile_cache.MAX_BYTES_ENV)}
    folder = tmp_path / compile_cache.FOLDER
    folder.mkdir()
    limits = []
    for value in (None, "5000"):
        _programs(folder, 3, size=compile_cache.MAX_BYTES // 2)
        run_env = env if value is None else {**env, compile_cache.MAX_BYTES_ENV: value}
        done = subprocess.run([sys.executable, "-c", _PRINT_LIMIT, str(tmp_path)], env=run_env, capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        limits.append(int(done.stdout.split()[-1]))
        if value is None:  # 1.5 GiB against the 1 GiB budget: down to half, the newest program kept
            assert sorted(p.name for p in folder.glob("*-cache")) == ["program-0-cache"]
        else:  # the caller's limit goes to JAX, which evicts as it writes: opening removes nothing
            assert len(list(folder.glob("*-cache"))) == 3
    assert limits == [-1, 5000]


def _eval(out: Path, cache: Path, compile_dir: Path) -> list[dict]:
    env = {**os.environ, "STEM_CACHE_DIR": str(cache), compile_cache.ENV: str(compile_dir)}
    env.pop(compile_cache.MAX_BYTES_ENV, None)  # as a user's CLI runs (tests/conftest.py sets its own)
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
    # the tracers came from the cache: their executables were read, not written again
    tracers = [p for p in mtimes if p.name.startswith("jit_trace_batch") and p.name.endswith("-cache")]
    assert tracers and all(p.stat().st_mtime_ns == mtimes[p] for p in tracers)
