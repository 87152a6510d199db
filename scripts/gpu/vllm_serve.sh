#!/usr/bin/env bash
# On the H200 (issue 19): start vLLM 0.25.0 on SmolLM2-135M-Instruct (bf16, the HF directory converted from
# the carried GGUF) in the background, with its own site directory, and wait for /health. Runs
# vllm_carry.sh first, so the call that carries the last part can also start the server. Idempotent: a
# healthy server is left as it is.
#
#   VLLM_SERVE_MODE=compiled (default: torch.compile + CUDA graphs, vLLM's production setting; if the server
#   dies before it is healthy, it is started once more with --enforce-eager) | eager
#   VLLM_SERVE_ARGS="..."      more `vllm serve` flags
#   VLLM_START_TIMEOUT=420     seconds to wait for /health
#
# The server: VLLM_SERVER_DEV_MODE=1 (/collective_rpc for the weight reload, /sleep, /wake_up,
# /reset_prefix_cache), --logprobs-mode processed_logprobs (log_softmax(logits / T), what the trainer
# recomputes), --enable-sleep-mode (the backend's default pause_mode), 30% of the GPU's memory (the rest is
# for the embedded engine's benchmark and the trainer); the attention backend is vLLM's choice (FLASH_ATTN,
# i.e. FA3, on Hopper; TRITON_ATTN if FA3 would not load); FlashInfer is not carried (its sampler is off,
# and processed_logprobs would not use it anyway). Log: /tmp/agentr1-vllm/serve.log.
set -uo pipefail
bash scripts/gpu/vllm_carry.sh
source scripts/gpu/lib.sh
source scripts/gpu/vllm_env.sh

healthy() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$VLLM_URL/health" 2> /dev/null; }
if healthy; then echo "vLLM already answers at $VLLM_URL"; exit 0; fi

[ -f "$VLLM_SITE/.unpacked" ] || { echo "MISSING: the vLLM parts (see 'still to carry' above)"; exit 1; }
for _ in $(seq 1 120); do  # the GGUF conversion runs in the background (vllm_carry.sh): ~35 s
  [ -f "$VLLM_WORK/convert.ended" ] && break
  [ -f "$VLLM_WORK/convert.started" ] || break
  sleep 2
done
[ -f "$VLLM_MODEL/config.json" ] || { echo "MISSING: $VLLM_MODEL (the GGUF conversion)"; tail -n 20 "$VLLM_WORK/convert.log"; exit 1; }

start() {  # mode
  local extra=()
  [ "$1" = eager ] && extra+=(--enforce-eager)
  echo "starting vLLM ($1) on $VLLM_MODEL at $VLLM_URL"
  # PYTHONPATH: vLLM's site only (not the trainer's: vLLM wants fastapi < 0.137 and transformers >= 5.5.3)
  setsid env PYTHONPATH="$VLLM_SITE" PYTHONUNBUFFERED=1 VLLM_SERVER_DEV_MODE=1 HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_CACHE_ROOT=/tmp/vllm-cache VLLM_USE_FLASHINFER_SAMPLER=0 \
    python3 -m vllm.entrypoints.cli.main serve "$VLLM_MODEL" --host 127.0.0.1 --port "$VLLM_PORT" \
    --dtype bfloat16 --logprobs-mode processed_logprobs --enable-sleep-mode --gpu-memory-utilization 0.3 \
    --seed 0 --disable-uvicorn-access-log "${extra[@]}" ${VLLM_SERVE_ARGS:-} \
    < /dev/null >> "$VLLM_WORK/serve.log" 2>&1 &
  echo $! > "$VLLM_WORK/serve.pid"
}

wait_healthy() {
  local t0=$SECONDS pid
  pid=$(cat "$VLLM_WORK/serve.pid")
  while ((SECONDS - t0 < ${VLLM_START_TIMEOUT:-420})); do
    if healthy; then echo "vLLM healthy after $((SECONDS - t0)) s"; return 0; fi
    if ! kill -0 "$pid" 2> /dev/null; then echo "vLLM exited before it was healthy:"; tail -n 60 "$VLLM_WORK/serve.log"; return 1; fi
    sleep 2
  done
  echo "vLLM not healthy after ${VLLM_START_TIMEOUT:-420} s:"; tail -n 60 "$VLLM_WORK/serve.log"; return 1
}

mode=${VLLM_SERVE_MODE:-compiled}
start "$mode"
if ! wait_healthy; then
  [ "$mode" = compiled ] || exit 1
  kill -- -"$(cat "$VLLM_WORK/serve.pid")" 2> /dev/null; sleep 3
  echo "=== again with --enforce-eager"
  mode=eager
  start eager
  wait_healthy || exit 1
fi
echo "$mode" > "$VLLM_WORK/serve.mode"
python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$VLLM_URL/v1/models"
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader
