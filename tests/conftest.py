"""Shared fixtures. Tests live in folders by stage (tests/trace, tests/plan, tests/eval, ...), named by the
behaviour they pin. pytest imports them in its default ("prepend") mode without __init__.py files, so every
test file's basename is unique across tests/; the helper modules here (fuzz_inputs.py, build_lock_harness.py)
import as top-level modules because this file puts its folder on sys.path (also where the folders are
packages, as in Bazel's runfiles)."""

import hashlib
import os
import sys
from pathlib import Path

import pytest

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))


TEST_COMPILE_CACHE_PREFIX = "xla-compiled-tests-"
TEST_COMPILE_CACHE_BYTES = 1 << 30  # past this, a session starts by dropping the oldest half of the programs


def _test_compile_cache_folder() -> Path:
    """Where the suite keeps compiled XLA programs between runs: beside the users' own cache (``$STEM_CACHE_DIR``,
    else ``~/.cache/stem_jax``), in a folder of its own named after the XLA_FLAGS in effect, so the programs
    compiled under the flags below never mix with the tuned ones the CLI keeps in ``xla-compiled``."""
    from stem_jax.config import default_cache_dir

    flags = " ".join(sorted(os.environ.get("XLA_FLAGS", "").split()))
    return default_cache_dir() / (TEST_COMPILE_CACHE_PREFIX + hashlib.sha256(flags.encode()).hexdigest()[:8])


def _hypothesis_profiles() -> None:
    """Property tests draw the same examples on every run (``derandomize``: a failure reproduces, and a repeated run
    reuses the compiled shapes of the last one). ``HYPOTHESIS_PROFILE=explore`` draws fresh examples instead, for a
    deliberate search; a test's own ``@settings`` still sets its example count."""
    from hypothesis import settings

    settings.register_profile("deterministic", derandomize=True, database=None)
    settings.register_profile("explore", derandomize=False)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


def pytest_configure(config):
    _hypothesis_profiles()
    # Most of the suite's CPU time is XLA compiling small test shapes (thousands of distinct programs), and most
    # of a CPU compile is LLVM optimising code that then runs for microseconds. These flags skip that work: the
    # programs, and so every result the tests compare, are the same; only their machine code is less tuned
    # (about a fifth less CPU time per compile-bound test, measured on test_trace_ladder). Set before JAX starts
    # its backend (no test module is imported yet) and inherited by the subprocesses tests start; a caller's own
    # XLA_FLAGS is left alone.
    if "XLA_FLAGS" not in os.environ:
        os.environ["XLA_FLAGS"] = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    # One persistent XLA compilation cache for the test processes and the CLI subprocesses they start, kept
    # between runs: a repeated run loads the executables of unchanged programs instead of compiling them again.
    # JAX keys each entry by the program, compile options, XLA flags, jaxlib version and device, so a changed
    # program compiles afresh and results are those of the same executables. $STEM_COMPILE_CACHE names another
    # folder or turns it off (0, off, false, no); a folder that cannot be written leaves compiling uncached.
    from stem_jax.compile_cache import enable_compile_cache, prune_compile_cache
    from stem_jax.config import default_cache_dir

    if "STEM_COMPILE_CACHE" not in os.environ:
        folder = _test_compile_cache_folder()
        os.environ["STEM_COMPILE_CACHE"] = str(folder)
        # no size limit in the test processes and the CLI subprocesses (JAX's variable, read by compile_cache too);
        # the controller (or the only process) prunes once instead, before any worker starts
        os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", "-1")
        if not hasattr(config, "workerinput"):
            prune_compile_cache(folder, TEST_COMPILE_CACHE_BYTES)
    enable_compile_cache(default_cache_dir())  # in the folder $STEM_COMPILE_CACHE names (programs of ~20 KB each)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """$STEM_DATA_DIR for real-data tests: skipped locally when unset, a failure in CI."""
    value = os.environ.get("STEM_DATA_DIR")
    if not value or not Path(value).is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"STEM_DATA_DIR is unset or missing ({value!r}); .ci/run must point it at ../shared/data")
        pytest.skip("STEM_DATA_DIR not set")
    return Path(value)


@pytest.fixture(scope="session")
def demo_hashing64(tmp_path_factory):
    """The demo KG's test split with hashing-encoder (d=64) embedding caches, built once per test process:
    ``(dataset, index, encoder, embeddings)``. Tests read it and never change it."""
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.encoder.hashing import HashingEncoder
    from stem_jax.kg.embeddings import build_kg_embeddings
    from stem_jax.kg.index import build_index

    dataset = load_dataset(DatasetSpec(name="demo"))
    index = build_index(dataset.triples)
    encoder = HashingEncoder(dim=64)
    embeddings = build_kg_embeddings(index, encoder, tmp_path_factory.mktemp("demo-emb64"), chunk_rows=1024,
                                     progress=False)
    return dataset, index, encoder, embeddings


_MAPS_BEFORE_CLEARING = 40_000


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
    ~85% of the suite). Clearing only above a threshold keeps modules that share compiled shapes fast: every
    clear makes the modules after it trace again what they share with the ones before. The threshold leaves the
    kernel's limit more than three times what the largest module adds between two checks."""
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
