#!/usr/bin/env bash
# Arithmetic chains (examples/chains/) on one H200: untrained -> SFT -> SFT+RL, 3 seeds, 128 held-out chains.
# Held-out chains share no computation (operand pair or its swapped twin), operand tuple, question or answer
# with any training or demonstration chain, by construction (examples/chains/tasks.py; checked by
# tests/recipes/test_chains_tasks.py). Demonstrations: the scripted expert (one correct calculator call per
# operation, then the result; examples/chains/expert.py), DEMOS training chains from a seed of their own.
# Needs what scripts/gpu/lib.sh lists (scripts/gpu/prepare.sh fetches it; carry it over several calls).
#
#   scripts/gpu/chains_h200.sh sweep | base | demos | sft SEED | rl SEED | all | summary | plot   (scripts/gpu/stages.sh)
#
# Order: `sweep` first (SFT on 16/32/64/128 demonstrations, seed 1, each on the held-out chains) and set DEMOS to
# the budget where SFT is partly competent (20-50%); then base, demos, and `sft N` + `rl N` per seed; summary, plot.
# DEMOS defaults to 128, the sweep's pick of 2026-12-01 (27.3% held-out on seed 1; 24-33% over seeds 1-3).
# scripts/gpu/compare_h200.sh runs SFT for the 3 seeds, then the 7 estimators x 3 seeds of RL, all at once.
# Estimated H200 times (not measured: scaled from docs/results.md's calculator runs on the H200 with the engine of
# 2026-11-29 -- 128 single-call rollouts ~12 s, update of ~31k tokens ~3.3 s, 96 evaluations ~10 s, SFT 156 steps
# + load ~67 s -- and from this recipe's CPU runs: ~4 sequential calls of ~30 tokens per chain, rows of ~450 tokens):
#   base ~1 min (+35 s GGUF conversion on a fresh machine)   demos (128) ~0.5 min   sweep (4 budgets) ~6-8 min
#   sft N ~1.5 min (8 steps + load + 128 evaluations)          rl N ~6-9 min (12 steps of ~30 s, 4 evaluations of ~30 s)
# so: call 1 base + demos + sweep; then one call per seed, `sft N && rl N` (an RL run cut by LIMIT_S resumes with
# `rl N` in the next call; raise RL_STEPS when the faster engine of issue 15 makes steps shorter).
# Goal (issue 16): SFT+RL beats SFT by >= 15 points held-out, mean of 3 seeds and each seed, with >= 2 tool calls
# per successful episode (summary.json: sft_rl.tool_calls_per_success).
set -euo pipefail
cd "$(dirname "$0")/../.."
RECIPE=chains
TRAIN_CFG=examples/chains/train_gpu.yaml
SFT_CFG=examples/chains/sft.yaml
DEMOS_FN=examples.chains.expert:demonstrations
DEMOS=${DEMOS:-128} EPOCHS=${EPOCHS:-1} RL_STEPS=${RL_STEPS:-12} VAL=${VAL:-128}
SWEEP=${SWEEP:-16 32 64 128}
source scripts/gpu/stages.sh
stages_main "$@"
