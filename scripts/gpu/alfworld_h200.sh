#!/usr/bin/env bash
# ALFWorld on generated games (examples/alfworld/generated) on one H200: untrained -> SFT -> SFT+RL, 3 seeds.
# Held-out: VAL generated games (default 64) that share no game with training (split by game fingerprint,
# tests/recipes/test_alfworld_gen.py). Demonstrations: the searching planner expert on DEMOS training games.
# Needs what scripts/gpu/lib.sh lists (scripts/gpu/prepare.sh fetches it; carry it over several calls).
#
#   scripts/gpu/alfworld_h200.sh start | watch | collect        (all stages in the background: scripts/gpu/stages.sh)
#   scripts/gpu/alfworld_h200.sh sweep | base | demos | sft SEED | rl SEED | all | summary | plot   (one at a time)
#
# DEMOS sets how competent SFT leaves the policy (aim: 20-50% held-out, so RL has room). Measured on the H200
# (2026-12-03, docs/results.md): 30 / 60 / 120 / 240 games -> 10.9 / 14.1 / 39.1 / 76.6% (seed 1); 120 over seeds
# 1-3: 39-56%. `start` with SWEEP= skips the sweep (DEMOS=120 then). The 2026-12-03 run (docs/results.md, rows 5-6):
#   SWEEP= DEMOS=120 VAL=128 RL_STEPS=40 PIPELINE_S=1250 SAVE_FREQ=2 CACHE_GB=6 ... start 575; watch 585; collect 420
# (three calls after the carries): SFT 41.1% -> SFT+RL 67.2% on 128 held-out games, 3 seeds, 26 steps of 39 s, with
# the RL settings train_gpu.yaml now holds (outcome-only reward, advantage_floor 0).
set -euo pipefail
cd "$(dirname "$0")/../.."
RECIPE=alfworld
TRAIN_CFG=examples/alfworld/generated/train_gpu.yaml
SFT_CFG=examples/alfworld/generated/sft.yaml
DEMOS_FN=examples.alfworld.generated.sft_demos:demonstrations
DEMOS=${DEMOS:-120} EPOCHS=${EPOCHS:-2} RL_STEPS=${RL_STEPS:-30} VAL=${VAL:-64}
SWEEP=${SWEEP-30 60 120 240}
source scripts/gpu/stages.sh
stages_main "$@"
