#!/usr/bin/env bash
# verl on Ray on the GPU machine (no network): GRPO steps of the calculator recipe
# (examples/calculator/train_gpu.yaml) with trainer.policy=ray — verl's FSDP TrainingWorker as a Ray
# actor per GPU, the policy served by the trainer's embedded engine and synced after every update —
# then tokens/s per GPU of the update step, MFU and the learning curve (scripts/gpu/ray_summary.py).
#
#   scripts/gpu/ray_run.sh smoke [overrides...]  random model of SmolLM2-135M's shape, 2 steps
#   scripts/gpu/ray_run.sh large [overrides...]  random 1.1B Llama (TinyLlama's shape, SmolLM2's vocabulary), 3 steps
#   scripts/gpu/ray_run.sh train [overrides...]  SmolLM2-135M-Instruct: the learning curve
#
# Pieces arrive over several calls to a warm machine (64 MiB each) and are kept in /tmp:
#   .whl/ .tok/ .m1/ .m2/ .m3/ as scripts/gpu/lib.sh says          scripts/gpu/prepare.sh
#   ray: .ray/ray-trim.tar.xz (a trimmed ray 2.60 for cp312), or the wheel in two parts .ray1/ + .ray2/,
#   and .raydeps/ (ray's dependencies)                            scripts/gpu/ray_prepare.sh
# A call that lacks a piece says which, and exits 0 after storing what it got. See docs/scale-out.md.
set -euo pipefail
mode=${1:?smoke, large or train}; shift
OUT=${OUT:-$PWD/out/gpu}
RAYSITE=/tmp/agentr1-ray-site # ray and its dependencies
RUN=/tmp/agentr1-ray-run-$mode
LIMIT_S=${LIMIT_S:-520}
mkdir -p "$OUT"
source scripts/gpu/lib.sh
STORE=$GPU_STORE
mkdir -p "$STORE/raydeps"
for f in .ray/* .ray1/* .ray2/*; do [ -f "$f" ] && cp "$f" "$STORE/"; done
for f in .raydeps/*.whl; do [ -f "$f" ] && cp "$f" "$STORE/raydeps/"; done
gpu_collect || exit 0

# -- ray -----------------------------------------------------------------------------------------
if [ ! -f "$RAYSITE/.installed" ]; then
  mkdir -p "$RAYSITE"
  if [ -f "$STORE/ray-trim.tar.xz" ]; then
    tar xJf "$STORE/ray-trim.tar.xz" -C "$RAYSITE"
  elif [ -f "$STORE/ray.whl.sha256" ] && ls "$STORE"/ray.whl.part-* > /dev/null 2>&1; then
    wheel=$(awk '{print $2}' "$STORE/ray.whl.sha256")
    cat "$STORE"/ray.whl.part-* > "$STORE/$wheel"
    if (cd "$STORE" && sha256sum -c --quiet ray.whl.sha256); then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$RAYSITE" "$STORE/$wheel"
    else
      rm -f "$STORE/$wheel"
      echo "MISSING: ray wheel incomplete ($(ls "$STORE"/ray.whl.part-* | wc -l) part(s) here): carry the other of .ray1/ .ray2/"
      exit 0
    fi
  else
    echo "MISSING: carry .ray/ (trimmed ray) or .ray1/ and then .ray2/ (scripts/gpu/ray_prepare.sh)"; exit 0
  fi
  if ls "$STORE"/raydeps/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$RAYSITE" "$STORE"/raydeps/*.whl
  fi
  touch "$RAYSITE/.installed"
fi

gpu_env "$RAYSITE"  # the real ray; no stub (scripts/gpu/stubs) on this path
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
GPUS=${GPUS:-$(nvidia-smi -L | wc -l)}
python3 -c 'import ray, torch, verl; print("ray", ray.__version__, "torch", torch.__version__, "verl", verl.__version__)' \
  || { echo "ray does not import: a dependency is missing (carry .raydeps/)"; exit 6; }

# -- model ---------------------------------------------------------------------------------------
if [ "$mode" = smoke ] || [ "$mode" = large ]; then
  [ -f "$STORE/tok.tgz" ] || { echo "MISSING: carry .tok (scripts/gpu/prepare.sh)"; exit 0; }
  model=/tmp/agentr1-random-$mode
  gpu_random_model "$model" "$([ "$mode" = large ] && echo large || echo small)"
  steps=$([ "$mode" = smoke ] && echo 2 || echo 3)
  # random weights never stop before max_tokens: few held-out tasks, no evaluation in between
  set -- actor_rollout_ref.model="$model" trainer.total_training_steps="$steps" trainer.test_freq=0 data.val_size=8 "$@"
else
  model=$(gpu_smollm2) || exit 0
fi

# -- train ---------------------------------------------------------------------------------------
rm -rf "$RUN"
(while sleep 20; do cp "$RUN/metrics.jsonl" "$OUT/ray_metrics_$mode.jsonl" 2>/dev/null && tail -n1 "$RUN/metrics.jsonl" | cut -c1-240; done) &
copier=$!
set +e
time timeout --signal=INT --kill-after=30 "$LIMIT_S" "${AGENTR1[@]}" train examples/calculator/train_gpu.yaml \
  trainer.device=cuda trainer.policy=ray trainer.n_gpus_per_node="$GPUS" trainer.nnodes=1 \
  trainer.default_local_dir="$RUN" db="sqlite:///$RUN/traces.db" "$@" --quiet
status=$?
set -e
kill "$copier" 2>/dev/null || true
cp "$RUN"/metrics.jsonl "$OUT/ray_metrics_$mode.jsonl" 2>/dev/null || true
cp "$RUN"/config.json "$OUT/ray_config_$mode.json" 2>/dev/null || true
cp "$RUN"/curves.png "$OUT/ray_curves_$mode.png" 2>/dev/null || true
python3 scripts/gpu/ray_summary.py "$RUN" "$model" "$GPUS" 2>&1 | tee "$OUT/ray_summary_$mode.txt" || true
exit $status
