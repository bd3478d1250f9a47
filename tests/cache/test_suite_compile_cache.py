"""The test suite's own XLA compilation cache (tests/conftest.py): kept beside the users' cache in a folder named
after the XLA flags, apart from the CLI's tuned programs, and pruned oldest first once it outgrows its budget."""

from __future__ import annotations

from conftest import TEST_COMPILE_CACHE_PREFIX, _test_compile_cache_folder

from stem_jax import compile_cache


def test_folder_is_beside_the_users_cache_and_named_after_the_xla_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("STEM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("XLA_FLAGS", "--a=1 --b=2")
    folder = _test_compile_cache_folder()
    assert folder.parent == tmp_path and folder.name.startswith(TEST_COMPILE_CACHE_PREFIX)
    assert folder.name != compile_cache.FOLDER
    monkeypatch.setenv("XLA_FLAGS", "--b=2 --a=1")  # the same flags in another order: the same programs
    assert _test_compile_cache_folder() == folder
    monkeypatch.setenv("XLA_FLAGS", "--a=1")
    assert _test_compile_cache_folder() != folder
