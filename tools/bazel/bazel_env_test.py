"""Smoke test for the Bazel setup (tag bazel_smoke): interpreter, runfiles, imports."""

import importlib
import os
import pkgutil
import sys

import pytest

RUNFILES = os.environ.get("TEST_SRCDIR", "")


def _runfile(*parts: str) -> str:
    return os.path.join(RUNFILES, *parts)


@pytest.mark.skipif(not RUNFILES, reason="only meaningful under `bazel test`")
def test_runs_under_configured_interpreter():
    with open(_runfile("local_python", "interpreter.txt")) as f:
        configured = f.read().strip()
    assert os.path.abspath(sys.executable) == os.path.abspath(configured)


@pytest.mark.skipif(not RUNFILES, reason="only meaningful under `bazel test`")
@pytest.mark.parametrize("name", ["stem_jax", "kernels"])
def test_first_party_packages_come_from_runfiles(name):
    module = importlib.import_module(name)
    # Not the source checkout / editable install: Bazel's runfiles must shadow them.
    assert os.path.abspath(module.__file__).startswith(os.path.abspath(RUNFILES) + os.sep), module.__file__


def test_every_subpackage_imports():
    import stem_jax

    names = [m.name for m in pkgutil.iter_modules(stem_jax.__path__, "stem_jax.") if m.ispkg]
    assert names, "stem_jax has no subpackages in the runfiles"
    for name in names:
        importlib.import_module(name)


def test_third_party_deps_from_interpreter():
    import jax.numpy as jnp
    import numpy as np

    assert int(jnp.arange(4).sum()) == 6
    assert np.asarray(jnp.ones(3)).shape == (3,)
