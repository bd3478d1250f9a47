"""The built wheel brings the pretrained planner: installed into a fresh venv, it answers on a triples-only KG."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from stem_jax.plan import pretrained

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(not pretrained.available(), reason="the pretrained planner is not built")
def test_wheel_installed_offline_in_a_fresh_venv_answers_on_a_triples_only_kg(tmp_path):
    # offline: the wheel is built without build isolation and installed with --no-index --no-deps; its
    # dependencies come from this interpreter's site-packages, added by a path line (not as a site dir, so the
    # editable install of the source tree that lives there is not loaded and the wheel's copy is what imports)
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "runs", "build", "*.egg-info", "__pycache__",
                                                             ".venv", "bazel-*", ".pytest_cache"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(tmp_path / "dist"), str(src)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("stem_jax-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "outer-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--no-deps", str(wheel)], check=True,
                   capture_output=True)
    kg = tmp_path / "kg"
    kg.mkdir()
    (kg / "triples.tsv").write_text("Alan Turing\treports_to\tGrace Hopper\nGrace Hopper\treports_to\tJohn von Neumann\n"
                                    "Alan Turing\tworks_in\tResearch\nResearch\tlocated_in\tManchester\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["STEM_CACHE_DIR"] = str(tmp_path / "cache")
    where = subprocess.run([str(python), "-c", "import stem_jax.plan.pretrained as p; f = p.model_folder(); "
                            "print(f, (f / 'branches' / 'branch-model.json').is_file())"],
                           check=True, capture_output=True, text=True, cwd=tmp_path, env=env).stdout
    assert str(venv) in where and where.split()[-1] == "True"  # the branch model ships beside the ranker
    common = ["--dataset", "files", "--data-dir", str(kg), "--no-progress"]
    stem = str(venv / "bin" / "stem-jax")
    subprocess.run([stem, "index", *common], check=True, capture_output=True, cwd=tmp_path, env=env)
    asked = subprocess.run([stem, "ask", "who does Alan Turing report to", *common], capture_output=True, text=True,
                           cwd=tmp_path, env=env)
    assert asked.returncode == 0, asked.stderr
    assert "pretrained path planner" in asked.stderr
    assert "1. Grace Hopper" in asked.stdout
