#!/usr/bin/env bash
# The seven advantage estimators on the arithmetic chains (issue 17), and SFT vs SFT+RL (issue 16), on one H200:
# SFT for seeds 1-3 at once, then RL from each seed's SFT checkpoint for every estimator x seed (21 runs) at once,
# each run's held-out success at the end (step 0 = the seed's SFT evaluation), then the table and curves.
# Recipes: examples/chains/estimators/<estimator>.yaml (identical but for algorithm.*); the task, the held-out
# chains and the agent are examples/chains/train_gpu.yaml's (scripts/gpu/chains_h200.sh, scripts/gpu/stages.sh).
#
#   compare_h200.sh carry            copy what this call carried (.whl .tok .m1/.m2/.m3) to /tmp (scripts/gpu/lib.sh)
#   compare_h200.sh start [WATCH_S]  demos, SFT x 3 seeds at once (+ their held-out evaluations), then launches the
#                                    RL driver in the background (setsid: it outlives the call) and watches it until
#                                    WATCH_S seconds after the call began (default 560)
#   compare_h200.sh watch [WATCH_S]  watch the RL driver until it is done or WATCH_S seconds have passed (560)
#   compare_h200.sh resume           launch the driver again: runs that were cut resume from their last checkpoint
#   compare_h200.sh collect          the table, summary and curves (examples/chains/estimators/compare.py) and a
#                                    tarball of every metric and log into $OUT (6 files)
#
# Budget (the same for every estimator): RL_STEPS (12) steps of 8 chains x 4 samples (32 episodes; 2 optimizer
# steps of 16), SAVE_FREQ (2). All 21 runs share the GPU and 16 cores; each run's training stops at RL_WALL_S
# (780 s) after the driver started, whatever step it reached (saved every SAVE_FREQ steps), then every run's last
# checkpoint is evaluated on the VAL (128) held-out chains, one sample each at temperature 1.0, 21 processes at
# once. The table gives the steps each run reached: a run cut before RL_STEPS is marked.
# Layout: $RUN (/tmp/agentr1-compare): traces.db (demos, SFT evaluations), results/seed<k>/ (SFT, stages.sh),
# results/rl/<estimator>/seed<k>/ (the RL run: metrics.jsonl, train.log, eval.json, eval_stats.json, run.json),
# driver.log, monitor.log. Old checkpoints are pruned as runs go (a checkpoint of SmolLM2-135M with its
# optimizer is ~2 GB, with a critic ~4 GB; the disk has 64 GB).
# DEVICE=cpu (with MODEL=<tiny model dir>, small VAL, DEMOS, RL_STEPS, ESTIMATORS, SEEDS) is the dry run on a CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
RECIPE=chains
TRAIN_CFG=examples/chains/train_gpu.yaml
SFT_CFG=examples/chains/sft.yaml
DEMOS_FN=examples.chains.expert:demonstrations
DEMOS=${DEMOS:-128} EPOCHS=${EPOCHS:-1} VAL=${VAL:-128}
RL_STEPS=${RL_STEPS:-12} SAVE_FREQ=${SAVE_FREQ:-2} RL_WALL_S=${RL_WALL_S:-780}
ESTIMATORS=${ESTIMATORS:-grpo rloo reinforce_plus_plus reinforce_plus_plus_baseline gae steppo gigpo}
DEVICE_OUT=${OUT:-$PWD/out/compare}
RUN=${RUN:-/tmp/agentr1-compare}
OUT=$RUN/results  # stages.sh writes the SFT results here; `collect` packs them into $DEVICE_OUT
RL=$OUT/rl
LIMIT_S=0  # stages.sh: no limit of its own (the driver's deadline is RL_WALL_S)
# 21 processes on 16 cores: no process spreads its CPU work over every core
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} MKL_NUM_THREADS=${MKL_NUM_THREADS:-2}
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
source scripts/gpu/stages.sh
CALL_START=$(date +%s)

# one RL run: train until RL_STEPS or the deadline (epoch seconds $3), then record how it ended
rl_run() {
  local name=$1 seed=$2 deadline=$3 dir=$RL/$1/seed$2 started rc=0 left
  mkdir -p "$dir"
  left=$((deadline - $(date +%s)))
  [ "$left" -gt 10 ] || { echo "{\"estimator\": \"$name\", \"seed\": $seed, \"skipped\": \"no time left\"}" > "$dir/run.json"; return; }
  started=$(date +%s.%N)
  # data.val_size=1: the trainer's own evaluations (before and after) cost one chain; the 128 come after (rl_eval)
  timeout --signal=INT --kill-after=60 "$left" "${AGENTR1[@]}" train "examples/chains/estimators/$name.yaml" \
    "db=sqlite:///$dir/traces.db" "data.val_size=1" "trainer.device=$DEVICE" "run_name=chains-$name-s$seed" \
    "actor_rollout_ref.model=$(last_json "$OUT/seed$seed/sft.json" checkpoint)" "trainer.seed=$seed" \
    "trainer.total_training_steps=$RL_STEPS" "trainer.save_freq=$SAVE_FREQ" "trainer.default_local_dir=$dir" \
    ${RL_ARGS:-} --quiet > "$dir/train.log" 2>&1 || rc=$?
  "${PY[@]}" - "$dir" "$name" "$seed" "$rc" "$started" "$(date +%s.%N)" "$RL_STEPS" <<'PY'
import json, sys
from pathlib import Path
d, name, seed, rc, t0, t1, want = sys.argv[1:]
rows = [json.loads(x) for x in (Path(d) / "metrics.jsonl").read_text().splitlines() if x.strip()] \
    if (Path(d) / "metrics.jsonl").exists() else []
steps = max((int(r["step"]) for r in rows if "step" in r), default=0)
run = {"estimator": name, "seed": int(seed), "rc": int(rc), "steps": steps, "steps_wanted": int(want),
       "cut": steps < int(want), "wall_s": round(float(t1) - float(t0), 1)}
(Path(d) / "run.json").write_text(json.dumps(run))
print(json.dumps(run))
PY
  # a finished run is never resumed: its optimizer state goes (~2-4 GB each); a cut one keeps it for `resume`
  if [ "$rc" -eq 0 ]; then rm -rf "$dir"/checkpoints/step_*/engine; fi
}

# the held-out evaluation of a run's last checkpoint, into that run's own store (21 at once: one SQLite each)
rl_eval() {
  local name=$1 seed=$2 dir=$RL/$1/seed$2 ckpt
  ckpt=$(last_checkpoints "$dir" | tail -n1)
  [ -n "$ckpt" ] || { echo "no checkpoint in $dir" >&2; return 0; }
  "${AGENTR1[@]}" eval "${JOB[@]}" "db=sqlite:///$dir/eval.db" --checkpoint "$ckpt/hf" \
    --run-id "chains-$name-s$seed-eval" 2> "$dir/eval.log" | tail -n1 > "$dir/eval.json" || true
  echo "{\"step\": ${ckpt##*step_}}" > "$dir/eval_step.json"
  "${PY[@]}" scripts/gpu/episode_stats.py "$dir/eval.db" "chains-$name-s$seed-eval" "$dir/eval_stats.json" > /dev/null \
    || echo "no evaluation for $name seed $seed (eval.log)" >&2
}

# the complete checkpoints of a run, oldest first (none: nothing, and no error)
last_checkpoints() {
  local ck
  for ck in "$1"/checkpoints/step_*; do
    case $ck in *.partial) continue ;; esac  # a save in progress
    [ -f "$ck/trainer_state.json" ] && echo "${ck##*step_} $ck"
  done | sort -n | cut -d' ' -f2- || true
}

# keep the newest complete checkpoint of every run; log memory, disk and load
prune_and_monitor() {
  local run ck
  while [ ! -f "$RUN/TRAINED" ]; do
    for run in "$RL"/*/seed*; do
      last_checkpoints "$run" | head -n -1 | while read -r ck; do rm -rf "$ck"; done
    done
    {
      echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) disk $(df -h /tmp | awk 'NR==2 {print $3 "/" $2}')" \
        "gpu $(nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu --format=csv,noheader 2>/dev/null || echo -)"
    } >> "$RUN/monitor.log"
    sleep 20
  done
}

stage_driver() {
  local deadline name seed pruner
  deadline=$(($(date +%s) + RL_WALL_S))
  rm -f "$RUN/TRAINED" "$RUN/DONE"
  stage "RL: $(echo $ESTIMATORS | wc -w) estimators x seeds $SEEDS, $RL_STEPS steps, until $(date -d "@$deadline" +%T)"
  prune_and_monitor &
  pruner=$!
  for name in $ESTIMATORS; do
    for seed in $SEEDS; do
      if [ -f "$RL/$name/seed$seed/run.json" ] && last_json "$RL/$name/seed$seed/run.json" cut | grep -q False; then
        continue  # finished in an earlier driver
      fi
      rl_run "$name" "$seed" "$deadline" &
    done
  done
  wait_for_children_but "$pruner"
  touch "$RUN/TRAINED"
  stage "held-out evaluation of every run's last checkpoint ($VAL chains)"
  for name in $ESTIMATORS; do for seed in $SEEDS; do rl_eval "$name" "$seed" & done; done
  wait
  touch "$RUN/DONE"
  stage "done"
}

# wait for every background job but the pruner ($1)
wait_for_children_but() {
  local pid
  for pid in $(jobs -p); do [ "$pid" = "$1" ] || wait "$pid" || true; done
}

launch_driver() {
  mkdir -p "$RUN"
  rm -f "$RUN/DONE" "$RUN/TRAINED"  # (the driver removes them too, but the watch may look first)
  setsid nohup env OUT="$DEVICE_OUT" RUN="$RUN" bash "$0" driver > "$RUN/driver.log" 2>&1 < /dev/null &
  echo "RL driver started (pid $!): $RUN/driver.log"
}

stage_watch() {
  local until=$((CALL_START + ${1:-560}))
  while [ "$(date +%s)" -lt "$until" ] && [ ! -f "$RUN/DONE" ]; do
    sleep 30
    "${PY[@]}" - "$RL" <<'PY' || true
import json, sys, time
from pathlib import Path
rl = Path(sys.argv[1])
cells = []
for run in sorted(rl.glob("*/seed*")):
    lines = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
    last = json.loads(lines[-1]) if lines else {}
    done = "E" if (run / "eval_stats.json").exists() else ("T" if (run / "run.json").exists() else "")
    cells.append(f"{run.parent.name[:8]}/{run.name[-1]}:{last.get('step', 0)}{done}"
                 f"({last.get('perf/step_s', 0):.0f}s,{last.get('success/train', 0):.2f})")
print(time.strftime("%T"), " ".join(cells), flush=True)
PY
    tail -n1 "$RUN/monitor.log" 2>/dev/null || true
  done
  [ -f "$RUN/DONE" ] && echo "RL driver: done" || echo "RL driver: still running ($(tail -n1 "$RUN/driver.log"))"
}

stage_start() {
  stage_demos
  local seed pids=()
  for seed in $SEEDS; do
    stage_sft "$seed" > "$RUN/sft_s$seed.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "an SFT stage failed:"; tail -n 30 "$RUN"/sft_s*.log; exit 3; }; done
  for seed in $SEEDS; do tail -n1 "$OUT/seed$seed/sft_eval.json"; done
  launch_driver
}

stage_collect() {
  mkdir -p "$DEVICE_OUT"
  "${PY[@]}" -m examples.chains.estimators.compare "$OUT" --out "$DEVICE_OUT" --seeds $SEEDS
  cp "$RUN/driver.log" "$DEVICE_OUT/driver_log.txt" 2>/dev/null || true
  (cd "$OUT" && find . -name checkpoints -prune -o \( -name '*.json' -o -name '*.jsonl' -o -name '*.log' \) -size -20M -print0 \
    | tar czf "$DEVICE_OUT/compare_h200_results.tgz" --null -T - "$RUN/monitor.log" 2>/dev/null) || true
  ls -la "$DEVICE_OUT"
}

what=${1:?carry, start, watch, resume, driver or collect}
shift || true
case "$what" in
  carry) source scripts/gpu/lib.sh; gpu_collect || echo "(the model parts come one per call: this is expected)" ;;
  start) stages_setup; stage_start; stage_watch "${1:-560}" ;;
  watch) stages_setup; stage_watch "${1:-560}" ;;
  resume) stages_setup; launch_driver; stage_watch "${1:-560}" ;;
  driver) stages_setup; stage_driver ;;
  collect) if [ "$DEVICE" = cpu ]; then PY=(.venv/bin/python); else PY=(python3); fi; stage_collect ;;
  *) echo "unknown stage $what" >&2; exit 2 ;;
esac; exit  # the driver outlives the call: bash must never read past here if the file is copied anew
