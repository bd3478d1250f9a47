"""A fresh clone runs the experiments as documented.

* No tracked file names an absolute path of the machine it was written on (a home, scratch, temp or
  workspace folder): defaults are arguments, relative paths, ``$STEM_DATA_DIR`` / ``$STEM_CACHE_DIR``.
* Every script in ``experiments/`` answers ``--help`` (its parser builds and its import-time defaults
  resolve without this machine's folders) and its help names no absolute machine path either.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# An absolute machine path: a top-level folder that only exists on some machine, at the start of a path
# token (a relative path with such a folder inside, or a URL's path, does not count). Spelled as a pattern, not
# as the paths themselves, so this file does not match itself (nor `git grep` for those folders).
MACHINE_PATH = re.compile(r"(?<![\w.~$-])/(?:work|home|root|tmp|Users|mnt|scratch|data)/[\w.$-]")


def _tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in out.decode().split("\0") if name]


def machine_paths(text: str) -> list[str]:
    """The lines of ``text`` that name an absolute machine path."""
    return [line.strip()[:160] for line in text.splitlines() if MACHINE_PATH.search(line)]


def test_pattern_finds_machine_paths_and_spares_relative_ones() -> None:
    home, work = "/" + "home/alice/x", "/" + "work/runs/gnn"
    assert machine_paths(f"--checkpoint {work}") and machine_paths(f'default="{home}"')
    assert machine_paths(f"STAGE={'/' + 'tmp/stage'} bash x.sh")
    assert not machine_paths("--checkpoint runs/gnn-metaqa-1000 STEM_DATA_DIR=../shared/data")
    home, work = "home" + "/", "work" + "/"
    assert not machine_paths(f"see https://example.com/{home}page and runs/{work}x, ~/.cache/stem_jax")


def test_no_tracked_file_names_an_absolute_machine_path() -> None:
    hits = []
    for path in _tracked_files():
        if not path.is_file():  # deleted in the working tree, not yet committed
            continue
        data = path.read_bytes()
        if b"\0" in data[:4096]:  # binary (images, archives)
            continue
        for line in machine_paths(data.decode("utf-8", errors="replace")):
            hits.append(f"{path.relative_to(ROOT)}: {line}")
    assert not hits, ("absolute machine paths in tracked files (use an argument, a path relative to the repo "
                      "root, $STEM_DATA_DIR or $STEM_CACHE_DIR):\n" + "\n".join(hits[:40]))


# Runs every script's `--help` in one child process (one JAX import for all, ~seconds): runpy as __main__
# with experiments/ on sys.path, the way `python experiments/X.py --help` runs it.
_DRIVER = r"""
import contextlib, io, json, runpy, sys
from pathlib import Path
scripts, out = [Path(p) for p in sys.argv[1:]], {}
sys.path.insert(0, str(scripts[0].parent))
for script in scripts:
    sys.argv = [str(script), "--help"]
    buffer, code = io.StringIO(), None
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:  # noqa: BLE001 - report any failure per script
        code = f"{type(exc).__name__}: {exc}"
    out[script.name] = {"code": code, "text": buffer.getvalue()}
print("@@" + json.dumps(out))
"""
HELPERS = {"paper_common.py"}  # imported by the paper scripts, not run


def test_every_experiment_script_answers_help(tmp_path: Path) -> None:
    scripts = sorted(p for p in (ROOT / "experiments").glob("*.py") if p.name not in HELPERS)
    assert scripts, "no experiment scripts found"
    # run from an empty folder: defaults must not depend on this machine's folders or the working directory
    proc = subprocess.run([sys.executable, "-c", _DRIVER, *map(str, scripts)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0 and "@@" in proc.stdout, proc.stderr[-3000:]
    results = json.loads(proc.stdout.split("@@", 1)[1])
    failed = {name: r["code"] for name, r in results.items() if r["code"] not in (0, None) or "usage:" not in r["text"]}
    assert not failed, f"`python experiments/X.py --help` failed or printed no usage: {failed}"
    leaks = {name: machine_paths(r["text"].replace(str(ROOT), "<repo>")) for name, r in results.items()}
    assert not {k: v for k, v in leaks.items() if v}, f"help names absolute machine paths: {leaks}"


def test_device_bench_script_parses() -> None:
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    subprocess.run(["bash", "-n", str(ROOT / "experiments" / "device_bench.sh")], check=True)
