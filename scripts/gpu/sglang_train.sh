#!/usr/bin/env bash
# On the GPU (issue 56), started detached by sglang_lease.sh train: GRPO on GSM8K + calculator
# (examples/gsm8k/tool_train_gpu.yaml) with Qwen2.5-Coder-0.5B-Instruct, its rollouts on a real SGLang server behind
# the trainer's gateway (actor_rollout_ref.rollout.name=sglang), the policy's weights handed to the server from GPU
# memory after every step (rollout.weight_sync auto: a loopback server takes CUDA IPC handles); then the base model
# and the last checkpoint compared greedily on the recipe's test split (`agentr1 eval --compare`, McNemar), both on
# the embedded engine, so that the comparison does not depend on the rollout backend.
#
#   bash scripts/gpu/sglang_train.sh RUN_DIR SGLANG_URL MODEL_DIR      STEPS (10), TEST (500), LIMIT_S (420)
# TRAIN_ARGS / EVAL_ARGS: more overrides (a CPU dry run against tests/backends/fake_sglang.py on tiny-qwen:
# TRAIN_ARGS="trainer.device=cpu data.train_batch_size=2 actor_rollout_ref.rollout.n=2" EVAL_ARGS="trainer.device=cpu")
# Writes into RUN_DIR: train.log, metrics.jsonl, compare.json (+ _tasks.json: each task's outcomes), ended.
set -uo pipefail
cd "$(dirname "$0")/../.."
RUN=${1:?run dir} URL=${2:?SGLang URL} MODEL=${3:?model dir}
source scripts/gpu/lib.sh
gpu_env "$PWD/scripts/gpu/stubs"
CFG=${CFG:-examples/gsm8k/tool_train_gpu.yaml}  # SmolLM2: examples/calculator/train_gpu.yaml (TEST 41)
stage() { echo "=== $(date -u +%T) $*"; }

stage "GRPO through SGLang at $URL: ${STEPS:-10} steps"
timeout --signal=INT --kill-after=30 "${LIMIT_S:-420}" "${AGENTR1[@]}" train "$CFG" "db=sqlite:///$RUN/traces.db" \
  "actor_rollout_ref.model=$MODEL" actor_rollout_ref.rollout.name=sglang "actor_rollout_ref.rollout.urls=[$URL]" \
  "trainer.total_training_steps=${STEPS:-10}" data.val_size=1 "trainer.save_freq=${STEPS:-10}" \
  "trainer.default_local_dir=$RUN/train" "run_name=$(basename "$CFG" .yaml)-sglang" ${TRAIN_ARGS:-} > "$RUN/train.log" 2>&1
echo "train: exit $?"
tail -n 15 "$RUN/train.log"
grep -c "update_weights_from_tensor" /tmp/agentr1-sglang/serve.log | sed 's/^/server log lines about tensor updates: /'
cp "$RUN/train/metrics.jsonl" "$RUN/metrics.jsonl" 2> /dev/null
ckpt=$(ls -d "$RUN"/train/checkpoints/step_*/hf 2> /dev/null | sort -V | tail -n 1)
if [ -n "$ckpt" ]; then
  stage "base vs $ckpt, greedy, ${TEST:-500} test problems, on the embedded engine"
  "${AGENTR1[@]}" eval "$CFG" "db=sqlite:///$RUN/eval.db" "data.test_size=${TEST:-500}" --split test --greedy --n 0 \
    --compare "$MODEL" "$ckpt" --output "$RUN/compare_tasks.json" ${EVAL_ARGS:-} > "$RUN/eval.log" 2>&1
  echo "eval: exit $?"
  tail -n 25 "$RUN/eval.log"
else
  echo "no checkpoint in $RUN/train/checkpoints"
fi
touch "$RUN/ended"
