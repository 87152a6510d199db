#!/usr/bin/env bash
# GSM8K + calculator (examples/gsm8k/tool_task.py) on one H200: untrained -> SFT -> SFT+RL, 3 seeds.
# Held-out: the recipe's 200 GSM8K test problems, evaluation only (no test question is a training row,
# tests/recipes/test_gsm8k_expert.py). Demonstrations: GSM8K's own solutions with every <<a*b=c>>
# annotation replayed as a calculator call (examples/gsm8k/expert.py), DEMOS training problems.
# Needs what scripts/gpu/lib.sh lists (scripts/gpu/prepare.sh fetches it; carry it over several calls).
#
#   scripts/gpu/gsm8k_h200.sh start | watch | collect        (all stages in the background: scripts/gpu/stages.sh)
#   scripts/gpu/gsm8k_h200.sh sweep | base | demos | sft SEED | rl SEED | all | summary | plot   (one at a time)
#
# Report the tool-call rate with the success (summary.json has both); claim a gain only outside the seeds' spread.
set -euo pipefail
cd "$(dirname "$0")/../.."
RECIPE=gsm8k
TRAIN_CFG=examples/gsm8k/tool_train_gpu.yaml
SFT_CFG=examples/gsm8k/tool_sft.yaml
DEMOS_FN=examples.gsm8k.expert:demonstrations
DEMOS=${DEMOS:-2000} EPOCHS=${EPOCHS:-2} RL_STEPS=${RL_STEPS:-30} VAL=${VAL:-200}
SWEEP=${SWEEP-250 500 1000 2000}
source scripts/gpu/stages.sh
stages_main "$@"
