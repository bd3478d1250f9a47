"""The test suite's own XLA compilation cache (tests/conftest.py): kept beside the users' cache in a folder named
after the XLA flags, apart from the CLI's tuned programs, and pruned oldest first once it outgrows its budget."""

from __future__ import annotations

import os

from conftest import TEST_COMPILE_CACHE_PREFIX, _prune_compile_cache, _test_compile_cache_folder

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


def test_prune_keeps_a_folder_within_budget_and_drops_the_oldest_to_half(tmp_path):
    for age in range(10):  # entry-0 is the newest
        entry = tmp_path / f"entry-{age}-cache"
        entry.write_bytes(b"x" * 100)
        os.utime(entry, ns=(10**18 - age * 10**9, 10**18 - age * 10**9))
    _prune_compile_cache(tmp_path, max_bytes=1000)
    assert len(list(tmp_path.glob("*-cache"))) == 10  # within budget: untouched
    _prune_compile_cache(tmp_path, max_bytes=900)
    assert sorted(p.name for p in tmp_path.glob("*-cache")) == [f"entry-{age}-cache" for age in range(4)]
    _prune_compile_cache(tmp_path / "absent", max_bytes=1)  # no folder yet: nothing to do
