#!/usr/bin/env bash
# Builds every Bazel target and runs the quick "bazel_smoke" test subset, offline.
#
#   tools/bazel_check.sh [PYTHON] [extra `bazel test` flags...]
#
# PYTHON: interpreter with stem_jax's dependencies (jax, numpy, pytest, ...) installed,
#   default $STEM_BAZEL_PYTHON, else ./.venv/bin/python. Bazel does not manage Python
#   packages; the py_* targets run under this interpreter (tools/bazel/python_configure.bzl).
# Extra arguments go to `bazel test`: flags (e.g. `--test_tag_filters=` to run every test)
#   and target patterns, which then replace //... (e.g. `--test_tag_filters= //tests/...`).
#
# Installs Debian's bazel-bootstrap (Bazel 4.2) with apt-get if `bazel` is missing.
# Environment: BAZEL_OUTPUT_USER_ROOT (default ${TMPDIR:-/tmp}/stem_jax_bazel_$UID) holds
# Bazel's server, cache and outputs; reuse it between runs for incremental builds.
# Exits non-zero if the install, the build or any selected test fails.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

PYTHON="${1:-${STEM_BAZEL_PYTHON:-$REPO/.venv/bin/python}}"
shift $(( $# > 0 ? 1 : 0 ))
if [[ "$PYTHON" != /* ]]; then
  if [[ "$PYTHON" == */* ]]; then
    PYTHON="$PWD/$PYTHON"
  else
    PYTHON="$(command -v "$PYTHON" || true)"
  fi
fi
if [[ -z "$PYTHON" || ! -x "$PYTHON" ]]; then
  echo "bazel_check: no Python interpreter at '${PYTHON}' (pass one: tools/bazel_check.sh /path/to/python)" >&2
  exit 2
fi
if ! "$PYTHON" -c 'import jax, numpy, pytest' >/dev/null 2>&1; then
  echo "bazel_check: $PYTHON cannot import jax, numpy and pytest; install the project (pip install -e '.[dev]')" >&2
  exit 2
fi

log() { echo "bazel_check: $*"; }

if ! command -v bazel >/dev/null 2>&1; then
  log "bazel not found; installing Debian's bazel-bootstrap"
  SUDO=()
  if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=(sudo -n); else
      echo "bazel_check: bazel is missing and we are not root (apt-get install bazel-bootstrap)" >&2
      exit 2
    fi
  fi
  apt_log="$(mktemp)"
  export DEBIAN_FRONTEND=noninteractive
  if ! { "${SUDO[@]}" apt-get install -y -q --no-install-recommends bazel-bootstrap >"$apt_log" 2>&1 ||
         { "${SUDO[@]}" apt-get update -q >>"$apt_log" 2>&1 &&
           "${SUDO[@]}" apt-get install -y -q --no-install-recommends bazel-bootstrap >>"$apt_log" 2>&1; }; }; then
    tail -n 30 "$apt_log" >&2
    echo "bazel_check: apt-get install bazel-bootstrap failed" >&2
    exit 2
  fi
  rm -f "$apt_log"
fi

OUTPUT_USER_ROOT="${BAZEL_OUTPUT_USER_ROOT:-${TMPDIR:-/tmp}/stem_jax_bazel_$(id -u)}"
mkdir -p "$OUTPUT_USER_ROOT"

STARTUP=(--output_user_root="$OUTPUT_USER_ROOT" --max_idle_secs=300)
FLAGS=(
  --noshow_progress
  --curses=no
  --color=no
  --repo_env=STEM_BAZEL_PYTHON="$PYTHON"
)

bz() { bazel "${STARTUP[@]}" "$@"; }
# Don't leave the Bazel server (a JVM) running after CI.
trap 'bz shutdown >/dev/null 2>&1 || true' EXIT

start=$SECONDS
log "python: $PYTHON; output_user_root: $OUTPUT_USER_ROOT"

log "bazel build //..."
bz build "${FLAGS[@]}" -- //...
log "build ok ($((SECONDS - start))s)"

# Extra arguments are flags, plus optional target patterns replacing //...
targets=(//...)
for arg in "$@"; do
  if [[ "$arg" != -* ]]; then targets=(); break; fi
done
log "bazel test ${targets[*]:-$*} (tag filter bazel_smoke unless overridden)"
bz test "${FLAGS[@]}" --test_tag_filters=bazel_smoke "$@" "${targets[@]}"
log "ok ($((SECONDS - start))s)"
