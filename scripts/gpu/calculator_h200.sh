#!/usr/bin/env bash
# `agentr1 train` on the calculator task on one GPU of a machine without network (the H200 that the
# device tool lends). Runs from the repository root there; what it needs arrives over several calls
# (scripts/gpu/lib.sh says what; scripts/gpu/prepare.sh, run here first, fetches it).
#
#   scripts/gpu/calculator_h200.sh smoke [overrides...]   random SmolLM2-sized model, 2 steps: pipeline + worst-case timing
#   scripts/gpu/calculator_h200.sh train [overrides...]   SmolLM2-135M-Instruct, examples/calculator/train_gpu.yaml
#
# Results land in $OUT (or out/gpu).
set -euo pipefail
mode=${1:?smoke or train}; shift
OUT=${OUT:-$PWD/out/gpu}
RUN=${RUN:-/tmp/agentr1-run-$mode}  # the run directory (store, checkpoints); emptied first
LIMIT_S=${LIMIT_S:-520}  # the training command's own limit: results are copied to $OUT after it
mkdir -p "$OUT"
source scripts/gpu/lib.sh
gpu_collect || exit 0
gpu_env "$PWD/scripts/gpu/stubs"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
python3 -c 'import torch, transformers, verl; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__, "verl", verl.__version__)'

if [ "$mode" = smoke ]; then
  gpu_random_model /tmp/agentr1-random
  config=examples/calculator/train_gpu.yaml
  set -- actor_rollout_ref.model=/tmp/agentr1-random trainer.total_training_steps=2 trainer.test_freq=1 "$@"
else
  gpu_smollm2 > /dev/null || exit 0
  config=examples/calculator/train_gpu.yaml
fi

rm -rf "$RUN"
(while sleep 20; do cp "$RUN/metrics.jsonl" "$OUT/" 2>/dev/null && tail -n1 "$RUN/metrics.jsonl" | cut -c1-240; done) &
copier=$!
set +e
time timeout --signal=INT --kill-after=30 "$LIMIT_S" "${AGENTR1[@]}" train "$config" \
  trainer.device=cuda trainer.default_local_dir="$RUN" db="sqlite:///$RUN/traces.db" "$@" --quiet
status=$?
set -e
kill "$copier" 2>/dev/null || true
cp "$RUN"/metrics.jsonl "$RUN"/config.json "$OUT/" 2>/dev/null || true
cp "$RUN"/curves.png "$OUT/curves_$mode.png" 2>/dev/null || true
python3 scripts/gpu/eval_samples.py "$RUN/traces.db" "$OUT/eval_samples_$mode.json" 12 || true
python3 - "$RUN/metrics.jsonl" <<'EOF' || true
import json, sys
keys = ["success/val", "reward/mean", "success/train", "rollout/seconds", "rollout/failed", "actor/pg_loss",
        "actor/entropy", "perf/update_s", "perf/tokens_per_s", "perf/step_s", "batch/rows", "actor/action_tokens"]
for line in open(sys.argv[1]):
    r = json.loads(line)
    print("step", r["step"], "  ".join(f"{k}={r[k]:.4g}" for k in keys if isinstance(r.get(k), (int, float))))
EOF
exit $status
