#!/usr/bin/env bash
# One lease on one GPU (issue 56): a real SGLang 0.5.17 server on Qwen2.5-Coder-0.5B-Instruct behind the gateway,
# its fixtures recorded and the backend's real-server tests run, a GRPO run through it with the weights synced from
# memory every step (GSM8K + calculator, greedy@1 before and after on the test split), and the rollout backends'
# speed side by side (SGLang, vLLM, the embedded engine). docs/backends.md, "SGLang on the GPU", has the call plan.
#
# Here, first (with the package registry):
#   bash scripts/gpu/sglang_prepare.sh; bash scripts/gpu/vllm_prepare.sh; bash scripts/gpu/qwen_prepare.sh
#   bash scripts/gpu/prepare.sh                      # .whl (the trainer's wheels)
#   python3 scripts/gpu/payload.py pack .whl .sgl1 .sgl2 .sgl3 .sgl4 .q01 ... .q12 .vllm1 .vllm2   # -> .c01 ...
# On the GPU, calls back to back (the machine keeps /tmp only while warm, 30 s idle):
#   carry .cNN:  bash scripts/gpu/sglang_lease.sh carry             (every chunk; the last one places everything)
#   then:        OUT=$OUT bash scripts/gpu/sglang_lease.sh serve     (SGLang up, fixtures, real-server tests)
#   then:        OUT=$OUT bash scripts/gpu/sglang_lease.sh train     (starts the run detached, waits WAIT_S)
#   then:        OUT=$OUT bash scripts/gpu/sglang_lease.sh collect   (waits for the run, results into $OUT)
#   then:        OUT=$OUT bash scripts/gpu/sglang_lease.sh bench     (the three backends' speed; vLLM last)
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
export SGLANG_MODEL_KIND=${SGLANG_MODEL_KIND:-qwen05}  # or smollm2 (carry .tok .m1 .m2 .m3 instead of .q01-.q12)
source scripts/gpu/lib.sh
source scripts/gpu/sglang_env.sh
OUT=${OUT:-$PWD/out/gpu}
RUN=/tmp/agentr1-sglang-train
mkdir -p "$OUT"
CALL_START=$SECONDS

place() {  # the unpacked payload's folders where lib.sh, sglang_env.sh and vllm_env.sh look for them
  [ -f /tmp/agentr1-payload/.placed ] && return 0
  [ -f /tmp/agentr1-payload/.done ] || return 1
  (cd /tmp/agentr1-payload && for f in .sgl*/*; do [ -f "$f" ] && cp "$f" "$SGLANG_STORE/"; done
   mkdir -p /tmp/agentr1-vllm-carry && for f in .vllm*/*; do [ -f "$f" ] && cp "$f" /tmp/agentr1-vllm-carry/; done
   gpu_collect > /dev/null) || return 1
  sglang_unpack sgsite "$SGLANG_SITE" || return 1
  gpu_env
  if [ "$SGLANG_MODEL_KIND" = qwen05 ]; then gpu_qwen05 > /dev/null || return 1; else gpu_smollm2 > /dev/null || return 1; fi
  touch /tmp/agentr1-payload/.placed
  echo "placed: trainer wheels in $GPU_SITE, SGLang site in $SGLANG_SITE, the model in $SGLANG_MODEL"
}

case ${1:-carry} in
carry)
  python3 scripts/gpu/payload.py collect
  place || true
  ;;
serve)
  place || { echo "MISSING: the payload (run carry with every .cNN)"; exit 1; }
  SGLANG_NO_CARRY=1 bash scripts/gpu/sglang_serve.sh || exit 1
  bash scripts/gpu/sglang_run.sh
  ;;
train)  # GRPO through SGLang, weights from memory every step; greedy@1 of the base and the result on the test split
  place || exit 1
  gpu_env "$REPO/scripts/gpu/stubs"
  if [ ! -f "$RUN/started" ]; then
    rm -rf "$RUN" && mkdir -p "$RUN" && touch "$RUN/started"
    setsid nohup env STEPS="${STEPS:-10}" TEST="${TEST:-500}" CFG="${CFG:-}" bash scripts/gpu/sglang_train.sh "$RUN" "$SGLANG_URL" \
      "$SGLANG_MODEL" > "$RUN/pipeline.log" 2>&1 < /dev/null &
    echo "started the SGLang training run (log $RUN/pipeline.log)"
  fi
  for _ in $(seq 1 $(( ${WAIT_S:-480} / 5 ))); do [ -f "$RUN/ended" ] && break; sleep 5; done
  tail -n 30 "$RUN/pipeline.log"
  ;;
collect)
  for _ in $(seq 1 $(( ${WAIT_S:-480} / 5 ))); do [ -f "$RUN/ended" ] && break; sleep 5; done
  tail -n 40 "$RUN/pipeline.log"
  tar czf "$OUT/sglang_train.tgz" -C "$RUN" --exclude='*.safetensors' --exclude='*.pt' --exclude='hf' \
    --exclude='actor' --exclude='weights-for-serving' . 2> /dev/null
  ls -l "$OUT"
  ;;
bench)  # decode speed: SGLang (running), the embedded engine (random weights of Qwen's shape), vLLM (started last)
  place || exit 1
  gpu_env
  rows=$OUT/serving_bench.jsonl
  vocab=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$SGLANG_MODEL/config.json")
  python3 bench/serving_bench.py decode --backend sglang --url "$SGLANG_URL" --label "SGLang 0.5.17" --out "$rows" --vocab "$vocab"
  python3 bench/serving_bench.py gateway --backend sglang --url "$SGLANG_URL" --tokenizer "$SGLANG_MODEL" \
    --label "gateway in front of SGLang 0.5.17" --out "$rows" --sessions 1 64 128
  kill -- -"$(cat "$SGLANG_WORK/serve.pid")" 2> /dev/null; sleep 5
  python3 - "$SGLANG_MODEL" /tmp/agentr1-qwen-random <<'PY'
import shutil, sys, torch
from pathlib import Path
from transformers import AutoConfig, AutoModelForCausalLM
source, out = Path(sys.argv[1]), Path(sys.argv[2])
torch.manual_seed(0)
AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source), dtype=torch.bfloat16).save_pretrained(out)
for f in source.iterdir():
    if f.suffix != ".safetensors" and f.name != "config.json" and f.is_file():
        shutil.copy(f, out / f.name)
PY
  python3 bench/serving_bench.py decode --backend local --model /tmp/agentr1-qwen-random \
    --label "agentr1 local (random weights, the served model's shape)" --out "$rows" --vocab "$vocab"
  if [ -f /tmp/agentr1-vllm-carry/vsite.parts ] && ((SECONDS - CALL_START < ${VLLM_AFTER_S:-300})); then
    VLLM_ENGINE_BENCH=0 VLLM_MODEL=$SGLANG_MODEL VLLM_START_TIMEOUT=240 bash scripts/gpu/vllm_serve.sh > "$OUT/vllm_serve.txt" 2>&1 \
      && python3 bench/serving_bench.py decode --backend vllm --url http://127.0.0.1:8000 --label "vLLM 0.25.0" \
        --out "$rows" --vocab "$vocab"
    tail -n 5 "$OUT/vllm_serve.txt"
  fi
  cat "$rows"
  ;;
*) echo "usage: $0 carry|serve|train|collect|bench"; exit 2 ;;
esac
