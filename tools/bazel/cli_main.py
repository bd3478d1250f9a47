"""Bazel entry point for the `stem-jax` console script (`stem_jax.cli.main:main`).

Mirrors the [project.scripts] entry in pyproject.toml, so `bazel run //stem_jax:stem-jax -- ARGS`
behaves like the installed `stem-jax ARGS`: it calls main() (whether or not
stem_jax/cli/main.py has an `if __name__ == "__main__"` block) from the directory
`bazel run` was started in, so relative paths (runs/, --out ...) land there rather than in
Bazel's runfiles tree.
"""

import os
import sys


def _run() -> int:
    cwd = os.environ.get("BUILD_WORKING_DIRECTORY")  # set by `bazel run`
    if cwd:
        sys.path[:] = [os.path.abspath(p) for p in sys.path]  # keep runfiles imports working
        os.chdir(cwd)
    from stem_jax.cli.main import main

    return main()


if __name__ == "__main__":
    sys.exit(_run())
