#!/usr/bin/env bash
# On the H200 (issue 43): start SGLang 0.5.17 (`python -m sglang.launch_server`) on SmolLM2-135M-Instruct (bf16,
# the HF directory gpu_smollm2 converts from the carried GGUF) in the background, with its own site directory,
# and wait for /health. Runs sglang_carry.sh first, so the call that carries the last part also starts the
# server; before starting, sglang_probe imports the server's modules and lists every one that is missing.
# Idempotent: a healthy server is left as it is. The server's log: $SGLANG_WORK/serve.log (and $OUT/sglang_serve.log).
#
#   SGLANG_ATTENTION=fa3|triton  default: fa3 when sgl-kernel's flash_ops was carried (.sgfa*), else triton
#   SGLANG_SKIP_TOKENIZER_INIT=1 start as verl does (--skip-tokenizer-init: token ids only, no stop strings);
#                                default off: the gateway's sglang backend sends stop strings
#   SGLANG_SERVE_ARGS="..."      more launch_server flags
#   SGLANG_START_TIMEOUT=420     seconds to wait for /health
#
# Fixed: --dtype bfloat16, --mem-fraction-static 0.3 (the rest of the GPU for the trainer and the other
# engines), --sampling-backend pytorch (flashinfer's sampler would JIT-compile with nvcc at the first sampled
# request; SGLang's pytorch sampler computes the same log_softmax(logits / T) logprobs), --random-seed 0,
# SGLANG_USE_SGL_FA3_KERNEL=1 (FA3 from sgl-kernel, not a download from the kernels hub, which the machine cannot
# reach), HF_HUB_OFFLINE=1.
set -uo pipefail
[ "${SGLANG_NO_CARRY:-0}" = 1 ] || bash scripts/gpu/sglang_carry.sh  # 1: the payload (scripts/gpu/payload.py) placed it
source scripts/gpu/lib.sh
source scripts/gpu/sglang_env.sh
OUT=${OUT:-$PWD/out/gpu}
mkdir -p "$OUT"

healthy() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$SGLANG_URL/health" 2> /dev/null; }
keep_log() { [ -f "$SGLANG_WORK/serve.log" ] && tail -n 2000 "$SGLANG_WORK/serve.log" > "$OUT/sglang_serve.log"; }
if healthy; then echo "SGLang already answers at $SGLANG_URL"; exit 0; fi

[ -f "$SGLANG_WORK/sgsite.unpacked" ] || { echo "MISSING: the SGLang parts (see 'still to carry' above)"; exit 1; }
gpu_env
if [ "${SGLANG_MODEL_KIND:-smollm2}" = qwen05 ]; then
  model=$(gpu_qwen05) || { echo "MISSING: Qwen2.5-Coder-0.5B (carry .q01 ... .q12)"; exit 1; }
else
  model=$(gpu_smollm2) || { echo "MISSING: SmolLM2 (carry .whl .tok .m1 .m2 .m3)"; exit 1; }
fi
sglang_probe 2>&1 | tee "$OUT/sglang_probe.txt" || { echo "the SGLang site lacks modules: see above"; exit 1; }

attention=${SGLANG_ATTENTION:-$([ -e "$SGLANG_SITE/sgl_kernel/flash_ops.abi3.so" ] && echo fa3 || echo triton)}
extra=()
[ "${SGLANG_SKIP_TOKENIZER_INIT:-0}" = 1 ] && extra+=(--skip-tokenizer-init)
echo "starting SGLang 0.5.17 (attention $attention${extra[*]:+, ${extra[*]}}) on $model at $SGLANG_URL"
# PYTHONPATH: SGLang's site only (not the trainer's: transformers 5.12.1 here, 5.10.4 there)
setsid env PYTHONPATH="$SGLANG_SITE" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  SGLANG_USE_SGL_FA3_KERNEL=1 SGLANG_CACHE_DIR=/tmp/sglang-cache DO_NOT_TRACK=1 \
  python3 -m sglang.launch_server --model-path "$model" --host 127.0.0.1 --port "$SGLANG_PORT" \
  --dtype bfloat16 --attention-backend "$attention" --sampling-backend pytorch --mem-fraction-static 0.3 \
  --random-seed 0 --log-level info "${extra[@]}" ${SGLANG_SERVE_ARGS:-} \
  < /dev/null >> "$SGLANG_WORK/serve.log" 2>&1 &
echo $! > "$SGLANG_WORK/serve.pid"
echo "$attention${extra:+ ${extra[*]}}" > "$SGLANG_WORK/serve.mode"

t0=$SECONDS
pid=$(cat "$SGLANG_WORK/serve.pid")
while ((SECONDS - t0 < ${SGLANG_START_TIMEOUT:-420})); do
  if healthy; then
    echo "SGLang healthy after $((SECONDS - t0)) s"
    python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$SGLANG_URL/model_info"
    nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader
    keep_log
    exit 0
  fi
  if ! kill -0 "$pid" 2> /dev/null; then echo "SGLang exited before it was healthy:"; tail -n 60 "$SGLANG_WORK/serve.log"; keep_log; exit 1; fi
  sleep 2
done
echo "SGLang not healthy after ${SGLANG_START_TIMEOUT:-420} s:"; tail -n 60 "$SGLANG_WORK/serve.log"; keep_log; exit 1
