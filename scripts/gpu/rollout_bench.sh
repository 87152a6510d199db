#!/usr/bin/env bash
# On the H200 (issue 15): bench/rollout_bench.py (a rollout of the trainer's own path against the engine alone
# on the same requests) on a random SmolLM2-shaped model, for each engine setting given, in the background
# (setsid: it outlives the call); each call waits up to WAIT_S seconds and copies the logs (run<i>.log: the
# bench's table and JSON line) into $OUT.
# Carry `.whl .tok` in the first call.
#   bash scripts/gpu/rollout_bench.sh "" "--set actor_rollout_ref.rollout.engine.compile=true" "--job calculator"
# (one run per argument: the bench's flags on top of ROLLOUT_ARGS, e.g. --set overrides or --job; "" runs
# ROLLOUT_ARGS alone: the chains job on the default engine).
set -uo pipefail
source scripts/gpu/lib.sh
gpu_collect > /dev/null || exit 1
gpu_env
work=/tmp/agentr1-rollout-bench
OUT=${OUT:-$PWD/out/gpu}
mkdir -p "$work" "$OUT"
if [ ! -f "$work/started" ]; then
  touch "$work/started"
  gpu_random_model /tmp/agentr1-rm > "$work/model.log" 2>&1
  i=0 script=""
  for settings in "$@"; do
    script+="python3 bench/rollout_bench.py --device cuda --model /tmp/agentr1-rm ${ROLLOUT_ARGS:---sessions 128 --n 8 --turns 4 --repeat 1 --modes process} $settings > $work/run$i.log 2>&1; "
    i=$((i + 1))
  done
  setsid bash -c "$script touch $work/ended" < /dev/null > /dev/null 2>&1 &
  echo "started $# rollout benchmark(s)"
fi
for _ in $(seq 1 "$(( ${WAIT_S:-540} / 5 ))"); do [ -f "$work/ended" ] && break; sleep 5; done
for f in "$work"/run*.log; do [ -f "$f" ] && cp "$f" "$OUT/"; done
echo "$([ -f "$work/ended" ] && echo ended || echo "still running")"
tail -n 12 "$work"/run*.log 2> /dev/null
