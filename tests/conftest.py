"""Shared fixtures. Tests live in folders by stage (tests/trace, tests/plan, tests/eval, ...), named by the
behaviour they pin. pytest imports them in its default ("prepend") mode without __init__.py files, so every
test file's basename is unique across tests/; the helper modules here (fuzz_inputs.py, build_lock_harness.py)
import as top-level modules because this file puts its folder on sys.path (also where the folders are
packages, as in Bazel's runfiles)."""

import os
import sys
import tempfile
from pathlib import Path

import pytest

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))


def pytest_configure(config):
    """One XLA compilation cache for the whole session, subprocesses included: each CLI subprocess would
    otherwise compile the same tracers again (or fill a cache per test's own STEM_CACHE_DIR)."""
    if "STEM_COMPILE_CACHE" not in os.environ:
        os.environ["STEM_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="stem-jax-xla-")
    # Most of the suite's CPU time is XLA compiling small test shapes (thousands of distinct programs), and most
    # of a CPU compile is LLVM optimising code that then runs for microseconds. These flags skip that work: the
    # programs, and so every result the tests compare, are the same; only their machine code is less tuned
    # (about a fifth less CPU time per compile-bound test, measured on test_trace_ladder). Set before JAX starts
    # its backend (no test module is imported yet) and inherited by the subprocesses tests start; a caller's own
    # XLA_FLAGS is left alone.
    if "XLA_FLAGS" not in os.environ:
        os.environ["XLA_FLAGS"] = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """$STEM_DATA_DIR for real-data tests: skipped locally when unset, a failure in CI."""
    value = os.environ.get("STEM_DATA_DIR")
    if not value or not Path(value).is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"STEM_DATA_DIR is unset or missing ({value!r}); .ci/run must point it at ../shared/data")
        pytest.skip("STEM_DATA_DIR not set")
    return Path(value)


_MAPS_BEFORE_CLEARING = 20_000


def _mapped_regions() -> int:
    try:
        with open("/proc/self/maps", "rb") as maps:
            return sum(1 for _ in maps)
    except OSError:  # not Linux
        return 0


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after a test module once the process maps many regions.

    Every CPU executable XLA compiles keeps memory mappings; the suite compiles thousands of tracer,
    GNN and encoder shapes in one process, and past the kernel's vm.max_map_count (65,530 here) the next
    compile's mmap fails inside LLVM and the process segfaults (seen in test_tracer_equivalence, after
    ~85% of the suite). Clearing only above a threshold keeps modules that share compiled shapes fast."""
    yield
    if _mapped_regions() > _MAPS_BEFORE_CLEARING:
        import gc

        import jax

        jax.clear_caches()
        gc.collect()


@pytest.fixture
def procs():
    """Processes a test starts (the build-lock race tests); any still alive at its end, a failed test's paused
    builder, are killed."""
    started: list = []
    yield started
    for proc in started:
        if proc.is_alive():
            proc.kill()
            proc.join(120)
