"""Macros for the stem_jax Python packages (see BUILD files under stem_jax/ and kernels/)."""

load("@rules_python//python:defs.bzl", "py_binary", "py_library", "py_test")

_CHECK = "//tools/bazel:import_closure_test.py"

# Files in a package directory that are not part of the library.
_NOT_DATA = [
    "**/*.py",
    "**/*.pyc",
    "**/__pycache__/**",
    "**/BUILD",
    "**/BUILD.bazel",
    "**/.*",
]

def py_package(name, deps = [], srcs = None, exclude = [], data = None, visibility = ["//visibility:public"], check_imports = True, **kwargs):
    """A py_library over every .py file in this directory tree, plus an import-closure test.

    glob() picks up modules added later without editing the BUILD file. Subdirectories
    without their own BUILD file belong to this library. Non-Python files (JSON, text
    fixtures, ...) become `data`.

    Args:
      name: library name (by convention the directory name, so `//stem_jax/kg` works).
      deps: libraries this package imports, e.g. ["//stem_jax:base"].
      srcs: override the default glob(["**/*.py"]).
      exclude: glob patterns to leave out of srcs and data.
      data: override the default glob of non-Python files.
      visibility: visibility of the library.
      check_imports: also generate `<name>_imports_test`, a quick test (tagged
        bazel_smoke) that fails if a module imports a first-party module missing from deps.
      **kwargs: passed to py_library.
    """
    if srcs == None:
        srcs = native.glob(["**/*.py"], exclude = exclude + ["**/__pycache__/**"], allow_empty = True)
    if data == None:
        data = native.glob(["**/*"], exclude = exclude + _NOT_DATA, allow_empty = True)
    py_library(
        name = name,
        srcs = srcs,
        data = data,
        deps = deps,
        srcs_version = "PY3",
        visibility = visibility,
        **kwargs
    )
    if check_imports:
        pkg = native.package_name()
        py_test(
            name = name + "_imports_test",
            srcs = [_CHECK],
            main = _CHECK,
            args = [pkg, "//%s:%s" % (pkg, name)],
            deps = [":" + name],
            size = "small",
            tags = ["bazel_smoke"],
            python_version = "PY3",
            srcs_version = "PY3",
        )

def console_script(name, module, deps, main = "//tools/bazel:cli_main.py", **kwargs):
    """py_binary for a [project.scripts] entry point, only if MODULE's file exists.

    The guard keeps `bazel build //...` green while the CLI module is still being
    written; the default `main` wraps `stem_jax.cli.main:main`.

    Args:
      name: binary name (matches the console script name).
      module: file in this package that defines main(), e.g. "main.py".
      deps: libraries the binary needs.
      main: entry point file that calls main().
      **kwargs: passed to py_binary.
    """
    if not native.glob([module], allow_empty = True):
        return
    py_binary(
        name = name,
        srcs = [main],
        main = main,
        deps = deps,
        python_version = "PY3",
        srcs_version = "PY3",
        **kwargs
    )
