# Untrained -> SFT -> SFT+RL on one GPU, several seeds: the stages shared by alfworld_h200.sh and gsm8k_h200.sh.
# A recipe script sets, then sources this file from the repository root and calls `stages_main "$@"`:
#   RECIPE     short name (runs, folders)         TRAIN_CFG  the GPU RL config (its held-out set is the eval set)
#   SFT_CFG    the SFT config                     DEMOS_FN   module:function returning the expert demonstrations
#   DEMOS EPOCHS RL_STEPS VAL   demonstrations, SFT epochs, GRPO steps, held-out tasks (environment overrides)
#   RL_ARGS    extra key=value overrides of the RL run (space-separated), e.g. "actor_rollout_ref.rollout.n=4"
#   JOB_ARGS   extra key=value overrides of every evaluation and of the RL run, e.g. "agent.timeout_s=3600"
#   LIMIT_S    the RL command's own time limit (GPU default 540 s, under the device's 10 minutes per call); the RL
#              run saves every SAVE_FREQ (5) steps, and `rl SEED` again resumes it from its last checkpoint
#
#   <script> base          the untrained policy on the VAL held-out tasks
#   <script> demos         the expert's demonstrations replayed into the store (once; shared by the seeds)
#   <script> sft SEED      SFT (data order and init seeded), then the SFT checkpoint on the held-out tasks
#   <script> rl SEED       GRPO from that seed's SFT checkpoint (held-out before, every test_freq steps, at the end)
#   <script> all           base, demos, then sft and rl for each of $SEEDS (default "1 2 3"), then summary
#   <script> summary       $OUT/summary.json: per stage the held-out success of each seed, mean and spread
#   <script> sweep         SFT budgets: for each n in $SWEEP, SFT (seed 1) on the first n demonstrations, then its
#                          held-out success: pick DEMOS where the SFT policy is partly competent (20-50%)
#   <script> plot          $OUT/${RECIPE}_curves.png: held-out success per stage and seed, the RL runs' curves
# One device call runs at most 10 minutes: run the stages in separate calls to a warm machine; $RUN (under /tmp)
# keeps the store and checkpoints between calls, $OUT (default out/gpu-$RECIPE) gets every result file.
# Evaluation: one sample per held-out task at the configs' rollout temperature (1.0).
# DEVICE=cpu runs the same stages on this machine with .venv (a dry run: add MODEL=<a tiny model dir> and small
# sizes); MODEL replaces the starting model (SmolLM2-135M-Instruct) of both SFT and the untrained evaluation.
OUT=${OUT:-$PWD/out/gpu-$RECIPE}
RUN=${RUN:-/tmp/agentr1-$RECIPE}
SEEDS=${SEEDS:-1 2 3}
DB="sqlite:///$RUN/traces.db"
DEVICE=${DEVICE:-cuda}

stages_setup() {
  mkdir -p "$OUT" "$RUN"
  if [ "$DEVICE" = cpu ]; then
    AGENTR1=(.venv/bin/agentr1) PY=(.venv/bin/python)
    export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false LITELLM_LOCAL_MODEL_COST_MAP=True
  else
    source scripts/gpu/lib.sh
    gpu_collect || exit 4
    gpu_env "$PWD/scripts/gpu/stubs"
    gpu_smollm2 > /dev/null || exit 4
    PY=(python3)
    LIMIT_S=${LIMIT_S:-540}
  fi
  JOB=("$TRAIN_CFG" "db=$DB" "data.val_size=$VAL" "trainer.device=$DEVICE" ${JOB_ARGS:-})
  SFT_MODEL=()
  if [ -n "${MODEL:-}" ]; then JOB+=("actor_rollout_ref.model=$MODEL"); SFT_MODEL=("model.path=$MODEL"); fi
}

stage() { echo; echo "== $RECIPE: $* ($(date +%T))"; }
# evaluate on the held-out tasks into run $1, result line to $2 (extra arguments: --checkpoint DIR); a crash of
# the process after it printed its result (seen on an overloaded CPU) does not lose the result
held_out_eval() {
  local run_id=$1 out=$2
  shift 2
  "${AGENTR1[@]}" eval "${JOB[@]}" "$@" --run-id "$run_id" | tail -n1 | tee "$out" || true
  grep -q '"success"' "$out" || { echo "evaluation $run_id gave no result" >&2; return 1; }
  "${PY[@]}" scripts/gpu/episode_stats.py "$RUN/traces.db" "$run_id" "${out%.json}_stats.json"
}

last_json() { "${PY[@]}" -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])' "$@"; }

stage_base() {
  stage "untrained policy on $VAL held-out tasks"
  held_out_eval "$RECIPE-base" "$OUT/base.json"
}

stage_demos() {
  stage "$DEMOS expert demonstrations ($DEMOS_FN)"
  "${PY[@]}" -m agentr1.trainer.sft.replay "$DEMOS_FN" "n=$DEMOS" --db "$RUN/traces.db" --run-id "$RECIPE-demos" \
    | tee "$OUT/demos.json"
}

stage_sft() {
  local seed=${1:?seed} dir=$OUT/seed$1
  mkdir -p "$dir"
  stage "SFT, seed $seed ($EPOCHS epochs)"
  "${AGENTR1[@]}" sft "$SFT_CFG" "data.db=$DB" "data.run_ids=[$RECIPE-demos]" "data.seed=$seed" "trainer.seed=$seed" \
    "trainer.total_epochs=$EPOCHS" "trainer.device=$DEVICE" "trainer.default_local_dir=$RUN/seed$seed/sft" "${SFT_MODEL[@]}" --quiet | tee "$dir/sft.json"
  cp "$RUN/seed$seed/sft/metrics.jsonl" "$dir/sft_metrics.jsonl"
  stage "SFT checkpoint of seed $seed on $VAL held-out tasks"
  held_out_eval "$RECIPE-sft-s$seed" "$dir/sft_eval.json" --checkpoint "$(last_json "$dir/sft.json" checkpoint)"
}

stage_rl() {
  local seed=${1:?seed} dir=$OUT/seed$1
  stage "GRPO from the SFT checkpoint of seed $seed, $RL_STEPS steps"
  local rl=$RUN/seed$seed/rl limit=()
  mkdir -p "$rl" "$dir"  # an existing run resumes from its last checkpoint (delete $rl to start over)
  if [ "${LIMIT_S:-0}" -gt 0 ]; then limit=(timeout --signal=INT --kill-after=30 "$LIMIT_S"); fi
  (while sleep 30; do cp "$rl/metrics.jsonl" "$dir/rl_metrics.jsonl" 2>/dev/null && tail -n1 "$rl/metrics.jsonl" | cut -c1-200; done) &
  local copier=$!
  "${limit[@]}" "${AGENTR1[@]}" train "$TRAIN_CFG" "db=sqlite:///$rl/traces.db" "data.val_size=$VAL" "trainer.device=$DEVICE" ${JOB_ARGS:-} \
    "run_name=$RECIPE-rl-s$seed" "actor_rollout_ref.model=$(last_json "$dir/sft.json" checkpoint)" "trainer.seed=$seed" \
    "trainer.total_training_steps=$RL_STEPS" "trainer.default_local_dir=$rl" "trainer.save_freq=${SAVE_FREQ:-5}" \
    ${RL_ARGS:-} --quiet | tee "$dir/rl.json" || true
  kill "$copier" 2>/dev/null || true
  cp "$rl/metrics.jsonl" "$dir/rl_metrics.jsonl"
  cp "$rl/curves.png" "$dir/rl_curves.png" 2>/dev/null || true
  "${PY[@]}" scripts/gpu/episode_stats.py "$rl/traces.db" "*-eval" "$dir/rl_stats.json" --step last
}

stage_summary() {
  "${PY[@]}" - "$OUT" $SEEDS <<'PY'
import json, statistics, sys
from pathlib import Path
out, seeds = Path(sys.argv[1]), sys.argv[2:]
def read(path):
    p = out / path
    return json.loads(p.read_text().strip().splitlines()[-1]) if p.exists() else None
def spread(values):
    values = [v for v in values if v is not None]
    return {"per_seed": values, "mean": statistics.mean(values) if values else None,
            "min": min(values, default=None), "max": max(values, default=None)}
stages = {"untrained": [read("base_stats.json")],
          "sft": [read(f"seed{s}/sft_eval_stats.json") for s in seeds],
          "sft_rl": [read(f"seed{s}/rl_stats.json") for s in seeds]}
summary = {"seeds": seeds, "temperature": 1.0}
for name, rows in stages.items():
    summary[name] = {k: spread([r.get(k) if r else None for r in rows])
                     for k in ("success", "tool_calls_per_episode", "episodes_with_tool_calls", "tool_calls_per_success",
                               "steps_per_episode", "sessions")}
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary, indent=1))
PY
}

stage_sweep() {
  local n dir
  stage "sweep: SFT on the first n demonstrations, n in ${SWEEP:?set SWEEP, e.g. \"32 64 128\"} ($EPOCHS epochs, seed 1)"
  for n in $SWEEP; do
    dir=$OUT/sweep/n$n
    mkdir -p "$dir"
    "${PY[@]}" -m agentr1.trainer.sft.replay "$DEMOS_FN" "n=$n" --db "$RUN/traces.db" --run-id "$RECIPE-sweep-n$n" \
      | tee "$dir/demos.json"
    "${AGENTR1[@]}" sft "$SFT_CFG" "data.db=$DB" "data.run_ids=[$RECIPE-sweep-n$n]" "trainer.total_epochs=$EPOCHS" \
      "trainer.device=$DEVICE" "trainer.default_local_dir=$RUN/sweep/n$n" "${SFT_MODEL[@]}" --quiet | tee "$dir/sft.json"
    held_out_eval "$RECIPE-sweep-eval-n$n" "$dir/sft_eval.json" --checkpoint "$(last_json "$dir/sft.json" checkpoint)"
  done
}

stage_plot() {  # after summary
  "${PY[@]}" - "$OUT" "$RECIPE" <<'PY'
import json, sys
from pathlib import Path
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out, recipe = Path(sys.argv[1]), sys.argv[2]
summary = json.loads((out / "summary.json").read_text())
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
labels = {"untrained": "untrained", "sft": "SFT", "sft_rl": "SFT+RL"}
for x, key in enumerate(labels):
    success = summary[key]["success"]
    left.bar(x, success["mean"] or 0.0, width=0.6, color="#9ab")
    left.scatter([x] * len(success["per_seed"]), success["per_seed"], color="k", s=12, zorder=3)
left.set_xticks(range(len(labels)), list(labels.values()))
left.set_ylabel(f"held-out success (temperature {summary['temperature']})")
for seed in summary["seeds"]:
    metrics = out / f"seed{seed}" / "rl_metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.exists() else []
    points = [(r["step"], r["success/val"]) for r in rows if r.get("success/val") is not None]
    if points:
        right.plot(*zip(*points), marker="o", label=f"seed {seed}")
right.set_xlabel("GRPO step from the SFT checkpoint")
right.set_ylabel("held-out success")
if right.lines:
    right.legend()
for ax in (left, right):
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
fig.suptitle(recipe)
fig.tight_layout()
fig.savefig(out / f"{recipe}_curves.png", dpi=110)
print(out / f"{recipe}_curves.png")
PY
}

stages_main() {
  local what=${1:?base, demos, sft SEED, rl SEED, all or summary}
  shift || true
  if [ "$DEVICE" = cpu ]; then PY=(.venv/bin/python); else PY=(python3); fi
  [ "$what" = summary ] && { stage_summary; return; }
  [ "$what" = plot ] && { stage_plot; return; }
  stages_setup
  case "$what" in
    base) stage_base ;;
    demos) stage_demos ;;
    sft) stage_sft "$@" ;;
    rl) stage_rl "$@" ;;
    sweep) stage_sweep ;;
    all)
      stage_base
      stage_demos
      for seed in $SEEDS; do stage_sft "$seed"; stage_rl "$seed"; done
      stage_summary
      stage_plot ;;
    *) echo "unknown stage $what" >&2; exit 2 ;;
  esac
}
