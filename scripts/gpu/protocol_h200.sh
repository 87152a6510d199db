#!/usr/bin/env bash
# Two learning results under the evaluation protocol (docs/evaluation.md) on one H200 at once, SFT then SFT+RL per
# seed, every checkpoint evaluated greedily and with K samples at temperature 1 (greedy@1, mean@K, pass@K):
#   teach   issue 44 part 3, the flaky calculator: scripts/gpu/teach_h200.sh's pipeline (DESIGNS=retry, VAL 128)
#   chains  issue 42 part 1, docs/results.md's arithmetic chains: scripts/gpu/chains_h200.sh's pipeline (DEMOS 128,
#           VAL 256, no sweep, no untrained evaluation; EVAL_ARGS makes every evaluation the protocol's)
# Both train until TRAIN_END_S after `start` began, whatever step they reached, then evaluate their last checkpoints;
# scripts/gpu/protocol_summary.py pairs each seed's SFT and SFT+RL evaluations (the tests of `agentr1 eval --compare`).
# Needs what scripts/gpu/lib.sh lists (scripts/gpu/prepare.sh), carried in earlier calls. The working tree (~13 MB)
# travels with every call, so .m1-.m3 (30 MB each) and .whl (34.5 MB) take four calls as prepare.sh splits them;
# the same GGUF stream cut 17 / 52 / 21.5 MB (names gguf.xz.part1-3: gpu_smollm2 checks their concatenation) takes
# three, the last one with a `git archive HEAD` snapshot (~1.8 MB) to run from, so uncommitted edits never run:
#   cat .m1/* .m2/* .m3/* > j; mkdir .p1 .p2 .p3; head -c 17000000 j > .p1/gguf.xz.part1
#   tail -c +17000001 j | head -c 52000000 > .p2/gguf.xz.part2; tail -c +69000001 j > .p3/gguf.xz.part3
#   git archive HEAD sdk core gateway viewer trainer adapters store cli envs examples/chains scripts pyproject.toml | tar x -C .snap
#   call 1 (carry .whl .tok .p1): mkdir -p /tmp/agentr1-carry; cp .p1/* /tmp/agentr1-carry/; source scripts/gpu/lib.sh; gpu_collect
#   call 2 (carry .p2): cp .p2/* /tmp/agentr1-carry/
#   call 3 (carry .p3 .snap): cp .p3/* /tmp/agentr1-carry/; cp -a .snap /tmp/snap; cd /tmp/snap; bash scripts/gpu/protocol_h200.sh start 200
#   then: cd /tmp/snap; OUT=$OUT bash scripts/gpu/protocol_h200.sh collect WAIT_S (again until both are done)
#
#   protocol_h200.sh start [WATCH_S]    convert the model once, launch both pipelines (setsid: they outlive the call)
#                                       and watch them until WATCH_S s after the call began (default 560)
#   protocol_h200.sh watch [WATCH_S]    watch them until both are done or WATCH_S s after the call began
#   protocol_h200.sh collect [WAIT_S]   wait up to WAIT_S s for both to end, then into $OUT: protocol.json (the
#                                       paired summary), teach.jsonl, teach_rl_metrics.jsonl, evals.tgz (every
#                                       evaluation's answer with its tasks' outcomes, the RL metrics), logs.tgz
# Settings (environment): SEEDS ("1 2 3"), K (8), TRAIN_END_S (660), TEACH_VAL (128), CHAINS_VAL (256),
# CHAINS_RL_STEPS (40), TEACH_RL_STEPS (60), CACHE_GB (teach 2, chains 4 GiB of KV cache per engine).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
CALL_START=${CALL_START:-$(date +%s)}
SEEDS=${SEEDS:-1 2 3} K=${K:-8} TRAIN_END_S=${TRAIN_END_S:-660}
TEACH_RUN=/tmp/agentr1-teach CHAINS_RUN=/tmp/agentr1-chains
OUT=${OUT:-$PWD/out/protocol}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 AGENTR1_ENGINE_PROCESS=0  # 6 runs and their evaluations on 16 cores

launch() {
  source scripts/gpu/lib.sh
  gpu_collect > /dev/null || exit 4
  gpu_env "$REPO/scripts/gpu/stubs"
  gpu_smollm2 > /dev/null || exit 4  # once, before the two pipelines look for it at the same time
  rm -rf "$TEACH_RUN" "$CHAINS_RUN" && mkdir -p "$TEACH_RUN" "$CHAINS_RUN"
  setsid nohup env CALL_START="$CALL_START" RUN="$TEACH_RUN" SEEDS="$SEEDS" DESIGNS=retry K="$K" \
    VAL="${TEACH_VAL:-128}" RL_STEPS="${TEACH_RL_STEPS:-60}" TRAIN_END_S="$TRAIN_END_S" CACHE_GB="${TEACH_CACHE_GB:-2}" \
    bash scripts/gpu/teach_h200.sh pipeline > "$TEACH_RUN/pipeline.log" 2>&1 < /dev/null &
  setsid nohup env CALL_START="$CALL_START" RUN="$CHAINS_RUN" OUT="$CHAINS_RUN/out" SEEDS="$SEEDS" SWEEP= BASE=0 \
    DEMOS=128 VAL="${CHAINS_VAL:-256}" RL_STEPS="${CHAINS_RL_STEPS:-40}" SAVE_FREQ=3 PIPELINE_S="$TRAIN_END_S" \
    CACHE_GB="${CHAINS_CACHE_GB:-4}" EVAL_ARGS="--greedy --n $K --temperature 1.0" \
    bash scripts/gpu/chains_h200.sh pipeline > "$CHAINS_RUN/pipeline.log" 2>&1 < /dev/null &
  echo "launched at $(date +%T): training until $(date -d "@$((CALL_START + TRAIN_END_S))" +%T)"
}

done_both() { [ -f "$TEACH_RUN/DONE" ] && [ -f "$CHAINS_RUN/DONE" ]; }

watch() {
  local until=$((CALL_START + ${1:-560})) left m
  while left=$((until - $(date +%s))) && [ "$left" -gt 0 ] && ! done_both; do
    sleep $((left < 60 ? left : 60))
    echo "$(date +%T) gpu $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>/dev/null)" \
      "load $(cut -d' ' -f1 /proc/loadavg); teach results $(ls "$TEACH_RUN/results" 2>/dev/null | wc -l)," \
      "chains: $(grep '^==' "$CHAINS_RUN/pipeline.log" 2>/dev/null | tail -n1)"
    for m in "$TEACH_RUN"/rl/*/metrics.jsonl "$CHAINS_RUN"/seed*/rl/metrics.jsonl; do
      [ -f "$m" ] && tail -n1 "$m" | python3 -c 'import json, sys
r = json.loads(sys.stdin.read())
print("   %s: step %s, %.0f s, train success %.2f" % (sys.argv[1], r.get("step"), r.get("perf/step_s") or 0,
      r.get("success/train") or 0))' "${m#/tmp/agentr1-}" || true
    done
  done
  done_both && echo "both pipelines done" || echo "still running"
}

collect() {
  local until=$((CALL_START + ${1:-0})) seed pairs=()
  while ! done_both && [ "$(date +%s)" -lt "$until" ]; do sleep 10; done
  done_both || echo "collecting while a pipeline still runs"
  source scripts/gpu/lib.sh > /dev/null
  gpu_env "$REPO/scripts/gpu/stubs"
  mkdir -p "$OUT"
  RUN=$TEACH_RUN OUT=$OUT bash scripts/gpu/teach_h200.sh collect 0 > "$OUT/teach_table.txt" 2>&1 || true
  for seed in $SEEDS; do
    pairs+=(--pair teach "$seed" "$TEACH_RUN/evals/sft-retry-s$seed.json" "$TEACH_RUN/evals/rl-retry-base-s$seed.json")
    pairs+=(--pair chains "$seed" "$CHAINS_RUN/results/seed$seed/sft_eval_tasks.json" "$CHAINS_RUN/results/seed$seed/rl_eval_tasks.json")
  done
  python3 scripts/gpu/protocol_summary.py "$OUT/protocol.json" "${pairs[@]}" | tee "$OUT/protocol_table.txt" || true
  mv "$OUT/rl_metrics.jsonl" "$OUT/teach_rl_metrics.jsonl" 2>/dev/null || true
  rm -f "$OUT/table.txt" "$OUT/log_tails.txt" "$OUT/pipeline.log"  # teach_table.txt holds the table
  (cd /tmp && find agentr1-teach/evals agentr1-teach/rl agentr1-chains/results -name checkpoints -prune -o \
    \( -name '*.json' -o -name '*.jsonl' \) -size -8M -print0 | tar czf "$OUT/evals.tgz" --null -T -) || true
  (cd /tmp && find agentr1-teach/logs agentr1-teach/pipeline.log agentr1-chains -maxdepth 3 -name '*.log' -print0 \
    | tar czf "$OUT/logs.tgz" --null -T -) || true
  ls -la "$OUT"
}

case ${1:-} in
  start) shift; launch; watch "$@" ;;
  watch) shift; watch "$@" ;;
  collect) shift; collect "$@" ;;
  *) echo "usage: $0 start [WATCH_S] | watch [WATCH_S] | collect [WAIT_S]" >&2; exit 2 ;;
esac
