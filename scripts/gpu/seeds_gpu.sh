#!/usr/bin/env bash
# The laptop demo's recipe over 3 seeds under the evaluation protocol on the test split (results row A2's command,
# `python -m examples.chains.seeds`), the three seeds at once on one lent GPU: per seed the expert's demonstrations,
# SFT, 8 GRPO steps, then `agentr1 eval --split test --compare SFT RL` (greedy, K samples at T=1) on TEST chains.
# Needs what scripts/gpu/lib.sh lists (scripts/gpu/prepare.sh; carry .whl .tok, then .m1, .m2, .m3).
#
#   scripts/gpu/seeds_gpu.sh start      convert SmolLM2 once, launch one process per seed (setsid: they outlive the call)
#   scripts/gpu/seeds_gpu.sh collect S  wait up to S seconds for all seeds, then into $OUT: seeds.tgz (each seed's
#                                       summary.json, compare.json, metrics and stage logs) and a table on stdout
# Settings (environment): SEEDS ("1 2 3"), TEST (128), K (8), RL_STEPS (8).
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${SEEDS:-1 2 3} TEST=${TEST:-128} K=${K:-8} RL_STEPS=${RL_STEPS:-8}
RUN=${RUN:-/tmp/agentr1-seeds}
OUT=${OUT:-$PWD/out/seeds-gpu}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 AGENTR1_ENGINE_PROCESS=0

DEVICE=${DEVICE:-cuda}
if [ "$DEVICE" = cpu ]; then  # the dry run here (TEST=4 K=2 RL_STEPS=1 SEEDS=1 DEVICE=cpu)
  PY=.venv/bin/python
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false LITELLM_LOCAL_MODEL_COST_MAP=True
else
  source scripts/gpu/lib.sh
  gpu_collect > /dev/null || exit 4
  gpu_env "$PWD/scripts/gpu/stubs"
  PY=python3
fi

case "${1:-}" in
  start)
    [ "$DEVICE" = cpu ] || { gpu_smollm2 > /dev/null || exit 4; }
    rm -rf "$RUN" && mkdir -p "$RUN"
    for seed in $SEEDS; do
      setsid nohup "$PY" -m examples.chains.seeds --seeds "$seed" --test "$TEST" --n "$K" --rl-steps "$RL_STEPS" \
        --device "$DEVICE" --out "$RUN/out$seed" > "$RUN/seed$seed.log" 2>&1 < /dev/null &
    done
    echo "launched seeds $SEEDS at $(date +%T)"
    ;;
  collect)
    until=$(( $(date +%s) + ${2:-500} ))
    while [ "$(date +%s)" -lt "$until" ]; do
      left=0; for seed in $SEEDS; do [ -f "$RUN/out$seed/summary.json" ] || left=$((left + 1)); done
      [ "$left" = 0 ] && break
      pgrep -f "examples.chains.seeds" > /dev/null || { echo "no seed process left; $left without a summary"; break; }
      sleep 20
      echo "$(date +%T) $left seed(s) running; $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>/dev/null)"
      for seed in $SEEDS; do grep -h "^== " "$RUN/seed$seed.log" | tail -1; done
    done
    mkdir -p "$OUT"
    (cd "$RUN" && tar czf "$OUT/seeds.tgz" --exclude='*.db' --exclude='*.db-*' --exclude='checkpoints' \
      --exclude='*.safetensors' --exclude='*.pt' seed*.log out*/summary.json out*/seed*/compare.json \
      out*/seed*/*.log out*/seed*/rl/metrics.jsonl out*/seed*/sft/metrics.jsonl 2>/dev/null || true)
    for seed in $SEEDS; do tail -3 "$RUN/seed$seed.log"; done
    ;;
  *) echo "usage: $0 start | collect SECONDS" >&2; exit 2 ;;
esac
