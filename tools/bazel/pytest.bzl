"""Macros that turn pytest-style test files into Bazel py_test targets."""

load("@rules_python//python:defs.bzl", "py_test")

_MAIN = "//tools/bazel:pytest_main.py"

SMOKE_TAG = "bazel_smoke"

def pytest_test(name, src, deps = [], data = [], args = [], tags = [], size = "medium", **kwargs):
    """One py_test that runs `pytest SRC` through //tools/bazel:pytest_main.py.

    Args:
      name: target name.
      src: the test_*.py file (in this package).
      deps: py_library deps; pytest itself comes from the configured interpreter.
      data: runtime files (conftest.py, fixtures, pyproject.toml for pytest's config).
      args: extra pytest arguments.
      tags: Bazel tags.
      size: Bazel test size (sets the default timeout).
      **kwargs: passed through to py_test (shard_count, env, timeout, ...).
    """
    py_test(
        name = name,
        srcs = [src, _MAIN],
        main = _MAIN,
        args = ["$(rootpath %s)" % src] + args,
        deps = deps,
        data = data,
        tags = tags,
        size = size,
        python_version = "PY3",
        srcs_version = "PY3",
        **kwargs
    )

def pytest_suite(name, srcs, smoke = [], deps = [], data = [], args = [], tags = [], size = "medium", per_file = {}, **kwargs):
    """One pytest_test per file in `srcs`, plus a test_suite `name` over all of them.

    Args:
      name: name of the test_suite.
      srcs: test files, normally glob(["test_*.py"], allow_empty = True).
      smoke: file names (e.g. "test_config.py") that get the "bazel_smoke" tag, the fast
        subset tools/bazel_check.sh runs; names of files that do not exist are ignored.
      deps: deps shared by every test.
      data: data shared by every test.
      args: pytest arguments shared by every test.
      tags: tags shared by every test.
      size: default size.
      per_file: optional {file name: dict of extra py_test attributes} (e.g. size, tags).
      **kwargs: passed to every py_test.
    """
    tests = []
    for src in srcs:
        extra = dict(per_file.get(src, {}))
        test_tags = list(tags) + extra.pop("tags", [])
        if src in smoke:
            test_tags.append(SMOKE_TAG)
        test_name = src[:-len(".py")] if src.endswith(".py") else src
        pytest_test(
            name = test_name,
            src = src,
            deps = deps + extra.pop("deps", []),
            data = data + extra.pop("data", []),
            args = args + extra.pop("args", []),
            tags = test_tags,
            size = extra.pop("size", size),
            **dict(kwargs, **extra)
        )
        tests.append(":" + test_name)

    # An empty `tests` list would mean "every test in the package", which is what we want.
    native.test_suite(
        name = name,
        tests = tests,
        tags = tags,
    )
