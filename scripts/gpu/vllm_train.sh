#!/usr/bin/env bash
# On the H200 (issue 19), after vllm_serve.sh: `agentr1 train` on the calculator job (examples/calculator/
# train_gpu.yaml) with its rollouts on the real vLLM server (actor_rollout_ref.rollout.name=vllm), weights
# synced to it after every step through the vllm backend's reload path (/collective_rpc update_config +
# reload_weights of <default_local_dir>/weights-for-serving/policy-<k>, then /reset_prefix_cache).
# The server is restarted first: vLLM reports no weight version, so a run gets a server holding the base
# weights (docs/training.md), whatever earlier tests loaded into it. Same seeds and config as the embedded
# engine's run in docs/results.md; results in $OUT as scripts/gpu/calculator_h200.sh writes them.
#
#   bash scripts/gpu/vllm_train.sh [overrides...]     e.g. trainer.total_training_steps=10
#   LIMIT_S (default 420): the training command's own limit
#   BASELINE=1 (default): the same run on the embedded engine at the same time (same config, seeds and
#              overrides, its results in $OUT/embedded), so the two curves come from one session
set -uo pipefail
source scripts/gpu/lib.sh
source scripts/gpu/vllm_env.sh
if [ -f "$VLLM_WORK/serve.pid" ]; then
  kill -- -"$(cat "$VLLM_WORK/serve.pid")" 2> /dev/null
  for _ in $(seq 1 30); do kill -0 "$(cat "$VLLM_WORK/serve.pid")" 2> /dev/null || break; sleep 1; done
fi
VLLM_START_TIMEOUT=${VLLM_START_TIMEOUT:-300} bash scripts/gpu/vllm_serve.sh || exit 1
OUT=${OUT:-$PWD/out/gpu}
baseline=
if [ "${BASELINE:-1}" = 1 ]; then
  OUT=$OUT/embedded RUN=/tmp/agentr1-run-embedded LIMIT_S=${LIMIT_S:-420} \
    bash scripts/gpu/calculator_h200.sh train "$@" > "$VLLM_WORK/train_embedded.log" 2>&1 &
  baseline=$!
fi
OUT=$OUT LIMIT_S=${LIMIT_S:-420} bash scripts/gpu/calculator_h200.sh train actor_rollout_ref.rollout.name=vllm \
  "actor_rollout_ref.rollout.urls=[$VLLM_URL]" "$@"
status=$?
if [ -n "$baseline" ]; then
  wait "$baseline"; echo "embedded-engine run: exit $?"
  cp "$VLLM_WORK/train_embedded.log" "$OUT/embedded/train.log" 2> /dev/null
  grep "^step" "$VLLM_WORK/train_embedded.log"
fi
grep -c "Reloading weights inplace\|reload_weights" "$VLLM_WORK/serve.log" | sed 's/^/server log lines about weight reloads: /'
tail -n 40 "$VLLM_WORK/serve.log" > "$OUT/serve_log_train.txt"
exit $status
