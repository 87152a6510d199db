#!/usr/bin/env bash
# On the H200 (issue 15): the embedded engine's speed against transformers' static-cache generate, and its
# exactness checks, with bench/engine_gpu_bench.py. Carry `.whl .tok` (scripts/gpu/prepare.sh) in the first
# call. The benchmark runs in the background (setsid: it outlives the call, which the device limits to 10
# minutes); every call waits up to WAIT_S seconds for it and copies what it has so far into $OUT:
#   engine_gpu.jsonl   one row per configuration and batch, the exactness checks first
#   engine_bench.log   its output (profiler tables with --profile)
# A call on a machine where it already ran only waits and copies. ENGINE_BENCH_ARGS replaces the default
# arguments (the default engine, the same with overlap off, the baseline, the compiled engine with and without
# overlap).
#   bash scripts/gpu/engine_bench.sh            # call 1 (carry .whl .tok), then again until "ended"
set -uo pipefail
source scripts/gpu/lib.sh
gpu_collect > /dev/null || exit 1
gpu_env
work=/tmp/agentr1-engine-bench
mkdir -p "$work" /tmp/agentr1-tok
OUT=${OUT:-$PWD/out/gpu}
mkdir -p "$OUT"
if [ ! -f "$work/started" ]; then
  tar xzf "$GPU_STORE/tok.tgz" -C /tmp/agentr1-tok && touch "$work/started"
  # shellcheck disable=SC2086  # the arguments are words
  setsid bash -c 'python3 bench/engine_gpu_bench.py --tokenizer /tmp/agentr1-tok --out "$0/engine_gpu.jsonl" \
    --work "$0/models" $1 > "$0/engine_bench.log" 2>&1; touch "$0/ended"' "$work" \
    "${ENGINE_BENCH_ARGS:---budget-s 600 --overlap-off --compile --compile-prefill-budget 65536}" \
    < /dev/null > /dev/null 2>&1 &
  echo "started: bench/engine_gpu_bench.py (log $work/engine_bench.log)"
fi
for _ in $(seq 1 "$(( ${WAIT_S:-540} / 5 ))"); do [ -f "$work/ended" ] && break; sleep 5; done
cp "$work/engine_gpu.jsonl" "$work/engine_bench.log" "$OUT/" 2> /dev/null
cp "$work"/engine_trace_b*.json.gz "$OUT/" 2> /dev/null
echo "$([ -f "$work/ended" ] && echo ended || echo "still running"); rows so far:"
cat "$work/engine_gpu.jsonl" 2> /dev/null
