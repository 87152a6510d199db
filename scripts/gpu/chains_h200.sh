#!/usr/bin/env bash
# Arithmetic chains (examples/chains/) on one H200: untrained -> SFT -> SFT+RL, 3 seeds, 128 held-out chains.
# Held-out chains share no computation (operand pair or its swapped twin), operand tuple, question or answer
# with any training or demonstration chain, by construction (examples/chains/tasks.py; checked by
# tests/recipes/test_chains_tasks.py). Demonstrations: the scripted expert (one correct calculator call per
# operation, then the result; examples/chains/expert.py), DEMOS training chains from a seed of their own.
# Needs what scripts/gpu/lib.sh lists (scripts/gpu/prepare.sh fetches it; carry it over several calls).
#
#   scripts/gpu/chains_h200.sh start | watch | collect        (all stages in the background: scripts/gpu/stages.sh)
#   scripts/gpu/chains_h200.sh sweep | base | demos | sft SEED | rl SEED | all | summary | plot   (one at a time)
#
# Order: `sweep` first (SFT on 16/32/64/128 demonstrations, seed 1, each on the held-out chains) and set DEMOS to
# the budget where SFT is partly competent (20-50%); then base, demos, and `sft N` + `rl N` per seed; summary, plot.
# DEMOS defaults to 128, the sweep's pick of 2026-12-01 (27.3% held-out on seed 1; 24-33% over seeds 1-3).
# scripts/gpu/compare_h200.sh runs SFT for the 3 seeds, then the 7 estimators x 3 seeds of RL, all at once.
# Measured on the H200 (2026-12-03, docs/results.md; three seeds at once through compare_h200.sh, the settings of
# train_gpu.yaml as overrides): SFT of 3 seeds with their 256-chain evaluations ~3 min; an RL step of 16 chains x 8
# ~8-9 s (rollout 4-7 s), so `rl N` (40 steps + 5 evaluations) ~7-9 min: near one call's 10 minutes (LIMIT_S cuts, `rl N` resumes). compare_h200.sh
# (ESTIMATORS=grpo) runs the three seeds' RL at once; this script runs them one after another.
# Goal (issue 16): SFT+RL beats SFT by >= 15 points held-out, mean of 3 seeds and each seed, with >= 2 tool calls
# per successful episode (summary.json: sft_rl.tool_calls_per_success).
set -euo pipefail
cd "$(dirname "$0")/../.."
RECIPE=chains
TRAIN_CFG=examples/chains/train_gpu.yaml
SFT_CFG=examples/chains/sft.yaml
DEMOS_FN=examples.chains.expert:demonstrations
DEMOS=${DEMOS:-128} EPOCHS=${EPOCHS:-1} RL_STEPS=${RL_STEPS:-40} VAL=${VAL:-256}
SWEEP=${SWEEP-16 32 64 128}
source scripts/gpu/stages.sh
stages_main "$@"
