#!/usr/bin/env bash
# Screen settings of the laptop demo's RL stage (examples/chains/demo.yaml) for how often they double held-out
# success: the demo's own demonstrations and SFT once (as examples/chains/demo.py runs them), then every setting
# REPS times from that one SFT checkpoint, all at once (each cut at RUN_S seconds), each run in a store and folder of its own. On the lent
# GPU machine this runs the learning of many demos in one call (the CPU demo's numbers differ: float32 on the
# CPU, the GPU's kernels here; a screen says which settings to confirm on the CPU, not what the demo does).
# Needs what scripts/gpu/lib.sh lists (scripts/gpu/prepare.sh; carry .whl .tok, then .m1, .m2, .m3).
#
#   scripts/gpu/demo_screen.sh "NAME key=value key=value" "NAME2 ..." ...     (REPS=4 VAL=64 STEPS=3 DEVICE=cuda)
#
# Writes $OUT/screen.jsonl: one line per run (setting, repetition, held-out success before and after, training
# success per step, tool calls per episode after), and $OUT/<name>_<rep>.log for a run that failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-4} VAL=${VAL:-64} STEPS=${STEPS:-3} DEVICE=${DEVICE:-cuda} DEMOS=${DEMOS:-12}
RUN=${RUN:-/tmp/agentr1-demo-screen}
OUT=${OUT:-$PWD/out/demo-screen}
mkdir -p "$RUN" "$OUT"
if [ "$DEVICE" = cpu ]; then
  AGENTR1=(.venv/bin/agentr1) PY=.venv/bin/python
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false LITELLM_LOCAL_MODEL_COST_MAP=True
  JOB=()
else
  source scripts/gpu/lib.sh
  gpu_collect > /dev/null || exit 4
  gpu_env "$PWD/scripts/gpu/stubs"
  gpu_smollm2 > /dev/null || exit 4
  PY=python3
  JOB=("actor_rollout_ref.rollout.engine.cache_gb=${CACHE_GB:-1.5}")
  export AGENTR1_ENGINE_PROCESS=${AGENTR1_ENGINE_PROCESS:-0}  # the engine in the trainer's process, as on the CPU
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}

SFT_DIR=$RUN/sft
if ! ls "$SFT_DIR"/checkpoints/step_*/hf > /dev/null 2>&1; then
  rm -rf "$RUN/demos.db" "$SFT_DIR"
  "$PY" -m agentr1.trainer.sft.replay examples.chains.expert:demonstrations "n=$DEMOS" size=short \
    --db "$RUN/demos.db" --run-id chains-demos --model smollm2 > "$OUT/demos.log" 2>&1
  "${AGENTR1[@]}" sft examples/chains/sft.yaml "data.db=sqlite:///$RUN/demos.db" "trainer.default_local_dir=$SFT_DIR" \
    model.path=smollm2 trainer.total_epochs=1 data.train_batch_size=2 optim.lr=5e-5 "trainer.device=$DEVICE" \
    > "$OUT/sft.log" 2>&1
fi
SFT=$(ls -d "$SFT_DIR"/checkpoints/step_*/hf | sort -V | tail -1)
echo "SFT checkpoint: $SFT"

pids=()
for setting in "$@"; do
  read -r name overrides <<< "$setting"
  for rep in $(seq 1 "$REPS"); do
    dir=$RUN/$name/$rep
    rm -rf "$dir" && mkdir -p "$dir"
    # shellcheck disable=SC2086
    timeout "${RUN_S:-520}" "${AGENTR1[@]}" train examples/chains/demo.yaml "db=sqlite:///$dir/traces.db" "actor_rollout_ref.model=$SFT" \
      "trainer.default_local_dir=$dir" "trainer.total_training_steps=$STEPS" "data.val_size=$VAL" \
      "trainer.device=$DEVICE" agent.timeout_s=600 "${JOB[@]}" $overrides > "$dir/run.log" 2>&1 &
    pids+=($!)
  done
done
echo "${#pids[@]} runs started $(date +%T)"
for pid in "${pids[@]}"; do wait "$pid" || true; done
echo "all ended $(date +%T)"

"$PY" - "$RUN" "$OUT" "$@" <<'PY'
import json, pathlib, shutil, sys
run, out, settings = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3:]
lines = []
for setting in settings:
    name, _, overrides = setting.partition(" ")
    for rep_dir in sorted((run / name).iterdir(), key=lambda p: int(p.name)):
        metrics = rep_dir / "metrics.jsonl"
        history = [json.loads(l) for l in metrics.read_text().splitlines() if l.strip()] if metrics.exists() else []
        evals = [h["success/val"] for h in history if h.get("success/val") is not None]
        row = {"setting": name, "overrides": overrides, "rep": int(rep_dir.name),
               "before": evals[0] if evals else None, "after": evals[-1] if len(evals) > 1 else None,
               "train_success": [h.get("success/train") for h in history if "success/train" in h],
               "rows": [h.get("actor/rows") for h in history if "success/train" in h]}
        if row["after"] is None:
            shutil.copy(rep_dir / "run.log", out / f"{name}_{rep_dir.name}.log")
        lines.append(row)
        print(json.dumps(row))
(out / "screen.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
for setting in settings:
    name = setting.partition(" ")[0]
    pairs = [(l["before"], l["after"]) for l in lines if l["setting"] == name and l["after"] is not None]
    doubled = sum(a >= 2 * b for b, a in pairs)
    print(f"{name}: after {[round(a, 3) for _, a in pairs]} from {pairs[0][0] if pairs else None}; doubled {doubled}/{len(pairs)}")
PY
