#!/usr/bin/env bash
# Arithmetic chains (examples/chains/) on one H200: untrained -> SFT -> SFT+RL, 3 seeds, 128 held-out chains.
# Held-out chains share no computation (operand pair or its swapped twin), operand tuple, question or answer
# with any training or demonstration chain, by construction (examples/chains/tasks.py; checked by
# tests/recipes/test_chains_tasks.py). Demonstrations: the scripted expert (one correct calculator call per
# operation, then the result; examples/chains/expert.py), DEMOS training chains from a seed of their own.
# Needs what scripts/gpu/lib.sh lists (scripts/gpu/prepare.sh fetches it; carry it over several calls).
#
#   scripts/gpu/chains_h200.sh sweep              SFT budgets ($SWEEP demos, seed 1, EPOCHS epochs), each on the
#                                                 held-out chains: pick DEMOS where SFT is partly competent (20-50%)
#   scripts/gpu/chains_h200.sh base | demos | sft SEED | rl SEED | all | summary   (scripts/gpu/stages.sh)
#   scripts/gpu/chains_h200.sh plot               $OUT/chains_curves.png: held-out success per stage and seed, and
#                                                 the RL runs' held-out curves (after summary)
#
# One device call runs at most 10 minutes: run base+demos, then sft N and rl N per seed, in separate calls to a
# warm machine ($RUN in /tmp keeps the store and the checkpoints between calls); results land in $OUT.
# Estimated H200 times (not measured: scaled from docs/results.md's calculator runs on the H200 with the engine of
# 2026-11-29 -- 128 single-call rollouts ~12 s, update of ~31k tokens ~3.3 s, 96 evaluations ~10 s, SFT 156 steps
# + load ~67 s -- and from this recipe's CPU runs: ~4 sequential calls of ~30 tokens per chain, rows of ~450 tokens):
#   base ~1 min (+35 s GGUF conversion on a fresh machine)   demos (64) ~0.5 min   sweep (4 budgets) ~6-8 min
#   sft N ~1.5 min (8 steps + load + 128 evaluations)          rl N ~6-9 min (12 steps of ~30 s, 4 evaluations of ~30 s)
# so: call 1 base + demos + sweep; then one call per seed, `sft N && rl N` (raise RL_STEPS when the faster engine
# of issue 15 makes a step shorter; a call is cut at 10 minutes and stage rl does not resume).
# Goal (issue 16): SFT+RL beats SFT by >= 15 points held-out, mean of 3 seeds and each seed, with >= 2 tool calls
# per successful episode (summary.json: sft_rl.tool_calls_per_success).
set -euo pipefail
cd "$(dirname "$0")/../.."
RECIPE=chains
TRAIN_CFG=examples/chains/train_gpu.yaml
SFT_CFG=examples/chains/sft.yaml
DEMOS_FN=examples.chains.expert:demonstrations
DEMOS=${DEMOS:-64} EPOCHS=${EPOCHS:-1} RL_STEPS=${RL_STEPS:-12} VAL=${VAL:-128}
SWEEP=${SWEEP:-16 32 64 128}
source scripts/gpu/stages.sh

stage_sweep() {  # one SFT run per demonstration budget, each evaluated on the held-out chains
  local n
  stage "sweep: SFT on n demonstrations for n in $SWEEP ($EPOCHS epochs, seed 1)"
  for n in $SWEEP; do
    local dir=$OUT/sweep/n$n
    mkdir -p "$dir"
    # the first n demonstrations: a prefix of the same seeded draw (generate_chains draws in order)
    "${PY[@]}" -m agentr1.trainer.sft.replay "$DEMOS_FN" "n=$n" --db "$RUN/traces.db" --run-id "$RECIPE-sweep-n$n" \
      | tee "$dir/demos.json"
    "${AGENTR1[@]}" sft "$SFT_CFG" "data.db=$DB" "data.run_ids=[$RECIPE-sweep-n$n]" "trainer.total_epochs=$EPOCHS" \
      "trainer.device=$DEVICE" "trainer.default_local_dir=$RUN/sweep/n$n" "${SFT_MODEL[@]}" --quiet | tee "$dir/sft.json"
    "${AGENTR1[@]}" eval "${JOB[@]}" --checkpoint "$(last_json "$dir/sft.json" checkpoint)" --run-id "$RECIPE-sweep-eval-n$n" \
      | tail -n1 | tee "$dir/sft_eval.json"
    "${PY[@]}" scripts/gpu/episode_stats.py "$RUN/traces.db" "$RECIPE-sweep-eval-n$n" "$dir/sft_stats.json"
  done
}

stage_plot() {
  "${PY[@]:-python3}" - "$OUT" <<'PY'
import json, sys
from pathlib import Path
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out = Path(sys.argv[1])
summary = json.loads((out / "summary.json").read_text())
fig, (bars, curves) = plt.subplots(1, 2, figsize=(10, 3.6))
names = ["untrained", "sft", "sft_rl"]
for x, name in enumerate(names):
    values = summary[name]["success"]["per_seed"]
    bars.bar(x, summary[name]["success"]["mean"] or 0, color="#9ab", width=0.6)
    bars.scatter([x] * len(values), values, color="k", zorder=3, s=12)
bars.set_xticks(range(3), ["untrained", "SFT", "SFT+RL"])
bars.set_ylabel(f"held-out success (T={summary['temperature']})")
for seed in summary["seeds"]:
    path = out / f"seed{seed}" / "rl_metrics.jsonl"
    if path.exists():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        points = [(r["step"], r["success/val"]) for r in rows if r.get("success/val") is not None]
        curves.plot(*zip(*points), marker="o", label=f"seed {seed}")
curves.set_xlabel("GRPO step (from the SFT checkpoint)")
curves.set_ylabel("held-out success")
curves.legend()
for ax in (bars, curves):
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(out / "chains_curves.png", dpi=110)
print(out / "chains_curves.png")
PY
}

case "${1:-}" in
  sweep) stages_setup; stage_sweep ;;
  plot) stage_plot ;;
  *) stages_main "$@" ;;
esac
