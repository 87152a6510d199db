#!/usr/bin/env bash
# The estimator comparison on one GPU: every recipe here, 3 seeds, the same budget (20 steps of
# 16 tasks x 8 samples), then the table and curves (compare.py). Usage:
#   bash examples/calculator/estimators/run.sh [out/estimators] [seeds...]
set -euo pipefail
root=${1:-out/estimators}
shift || true
seeds=("${@:-0 1 2}")
for seed in ${seeds[@]}; do
  for name in grpo rloo reinforce_plus_plus reinforce_plus_plus_baseline gae steppo gigpo; do
    out="$root/$name/seed$seed"
    agentr1 train "examples/calculator/estimators/$name.yaml" --quiet \
      trainer.seed="$seed" data.seed="$seed" trainer.default_local_dir="$out" db="sqlite:///$out/traces.db" \
      run_name="estimators-$name-seed$seed"
  done
done
python -m examples.calculator.estimators.compare "$root" --plot
