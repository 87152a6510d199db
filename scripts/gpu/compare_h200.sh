#!/usr/bin/env bash
# The seven advantage estimators on the arithmetic chains (issue 17), and SFT vs SFT+RL (issue 16), on one H200:
# SFT for seeds 1-3 at once, then RL from each seed's SFT checkpoint for every estimator x seed (21 runs) at once,
# each run's success on held-out test chains at the end (step 0 = the seed's SFT evaluation), then the table and curves.
# Recipes: examples/chains/estimators/<estimator>.yaml (identical but for algorithm.*); the task, the held-out
# chains and the agent are examples/chains/train_gpu.yaml's (scripts/gpu/chains_h200.sh, scripts/gpu/stages.sh).
#
#   compare_h200.sh carry            copy what this call carried (.whl .tok .m1/.m2/.m3) to /tmp (scripts/gpu/lib.sh)
#   compare_h200.sh start [WATCH_S]  demos, SFT x 3 seeds at once (+ their held-out evaluations), then launches the
#                                    RL driver in the background (setsid: it outlives the call) and watches it until
#                                    WATCH_S seconds after the call began (default 560)
#   compare_h200.sh watch [WATCH_S]  watch the RL driver until it is done or WATCH_S seconds have passed (560)
#   compare_h200.sh resume [WATCH_S] launch the driver again: runs that were cut resume from their last checkpoint
#   compare_h200.sh collect [WAIT_S] after waiting up to WAIT_S s for the driver to finish: the table, summary, curves
#                                    (examples/chains/estimators/compare.py) and a tarball of every metric and log
#                                    into $OUT (5 files)
#
# At most MAX_PARALLEL (10) runs train at once; the next starts as one ends (its evaluation included): 21 at once
# ran out of the H200's memory at start on 2026-12-01 (~12 GB of GPU memory a run, ~21 GB with a critic).
# Budget (the same for every estimator): RL_STEPS (16) steps of 8 chains x 4 samples (32 episodes; 2 optimizer
# steps of 16), a checkpoint every SAVE_FREQ (2) steps. All 21 runs share the GPU and the 16 cores. Training stops
# RL_TRAIN_END_S (1020 s) after the `start` call began -- whatever step a run reached -- so that the evaluations
# end inside the next call (start: 600 s, a gap, watch: 570 s; each evaluation ~1-3 min with 21 processes at once);
# `resume` trains until RL_WALL_S (600 s) from its launch. Each run, once it stops, evaluates its last checkpoint on
# VAL (128) held-out chains of the test split (`agentr1 eval --split test`: held out from training and from choosing
# settings), one sample each at temperature 1.0 (step 0: the seed's SFT evaluation, on the same chains). The table
# gives the steps each run reached: a run cut before RL_STEPS is marked.
# Layout: $RUN (/tmp/agentr1-compare): traces.db (demos, SFT evaluations), results/seed<k>/ (SFT, stages.sh),
# results/rl/<estimator>/seed<k>/ (the RL run: metrics.jsonl, train.log, eval.json, eval_stats.json, run.json),
# driver.log, monitor.log. Disk: a checkpoint of SmolLM2-135M is ~0.6 GB of hf/ and ~1.7 GB of optimizer state
# (policy/; ~3.4 GB with a critic): 21 runs would fill the 64 GB disk, so only the newest checkpoint of each run is
# kept, and only its hf/ (what the evaluation needs). KEEP_RESUME=1 keeps its policy/ too, while more than
# MIN_FREE_GB (12) are free: then `resume` continues runs that the deadline cut.
# DEVICE=cpu (with MODEL=<tiny model dir>, small VAL, DEMOS, RL_STEPS, ESTIMATORS, SEEDS) is the dry run on a CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD  # the driver outlives the call: its processes cd here again (by path) should the tree be laid anew
RECIPE=chains
TRAIN_CFG=examples/chains/train_gpu.yaml
SFT_CFG=examples/chains/sft.yaml
DEMOS_FN=examples.chains.expert:demonstrations
DEMOS=${DEMOS:-128} EPOCHS=${EPOCHS:-1} VAL=${VAL:-128}
MAX_PARALLEL=${MAX_PARALLEL:-10}  # runs at once: 21 at once ran out of GPU memory at start (docs/results.md)
RL_STEPS=${RL_STEPS:-16} SAVE_FREQ=${SAVE_FREQ:-2} RL_TRAIN_END_S=${RL_TRAIN_END_S:-1020} RL_WALL_S=${RL_WALL_S:-600}
ESTIMATORS=${ESTIMATORS:-grpo rloo reinforce_plus_plus reinforce_plus_plus_baseline gae steppo gigpo}
DEVICE_OUT=${OUT:-$PWD/out/compare}
RUN=${RUN:-/tmp/agentr1-compare}
OUT=$RUN/results  # stages.sh writes the SFT results here; `collect` packs them into $DEVICE_OUT
RL=$OUT/rl
LIMIT_S=0  # stages.sh: no limit of its own (the driver's deadline is RL_WALL_S)
# 21 processes on 16 cores: no process spreads its CPU work over every core
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} MKL_NUM_THREADS=${MKL_NUM_THREADS:-2}
# the engine in each run's own process, not a child of its own: 21 CUDA contexts instead of 42, and with 16 cores
# for 21 runs the engine process's separate GIL buys nothing (docs/benchmarks.md, rollouts inside agentr1 train)
export AGENTR1_ENGINE_PROCESS=${AGENTR1_ENGINE_PROCESS:-0}
# (no expandable_segments: CUDA IPC fails under it, see src/agentr1/engine/process.py)
source scripts/gpu/stages.sh
CALL_START=$(date +%s)

# one RL run: train until RL_STEPS or the deadline (epoch seconds $3), then record how it ended
rl_run() {
  local name=$1 seed=$2 deadline=$3 dir=$RL/$1/seed$2 started rc=0 left
  cd "$REPO"
  mkdir -p "$dir"
  left=$((deadline - $(date +%s)))
  [ "$left" -gt 10 ] || { echo "{\"estimator\": \"$name\", \"seed\": $seed, \"skipped\": \"no time left\"}" > "$dir/run.json"; return; }
  started=$(date +%s.%N)
  # data.val_size=1: the trainer's own evaluations (before and after) cost one chain; the VAL test chains come after
  # (rl_eval)
  timeout --signal=INT --kill-after=60 "$left" "${AGENTR1[@]}" train "examples/chains/estimators/$name.yaml" \
    "db=sqlite:///$dir/traces.db" "data.val_size=1" "trainer.device=$DEVICE" "run_name=chains-$name-s$seed" \
    "actor_rollout_ref.model=$(last_json "$OUT/seed$seed/sft.json" checkpoint)" "trainer.seed=$seed" \
    "trainer.total_training_steps=$RL_STEPS" "trainer.save_freq=$SAVE_FREQ" "trainer.default_local_dir=$dir" \
    ${RL_ARGS:-} --quiet > "$dir/train.log" 2>&1 || rc=$?
  times > "$dir/times.txt"  # this subshell's children's CPU time (2nd line): the training process's
  "${PY[@]}" - "$dir" "$name" "$seed" "$rc" "$started" "$(date +%s.%N)" "$RL_STEPS" "$(tail -n1 "$dir/times.txt")" <<'PY'
import json, re, sys
from pathlib import Path
d, name, seed, rc, t0, t1, want, cpu = sys.argv[1:]
cpu_s = sum(float(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", cpu))
rows = [json.loads(x) for x in (Path(d) / "metrics.jsonl").read_text().splitlines() if x.strip()] \
    if (Path(d) / "metrics.jsonl").exists() else []
steps = max((int(r["step"]) for r in rows if "step" in r), default=0)
run = {"estimator": name, "seed": int(seed), "rc": int(rc), "steps": steps, "steps_wanted": int(want),
       "cut": steps < int(want), "wall_s": round(float(t1) - float(t0), 1), "cpu_s": round(cpu_s, 1)}
(Path(d) / "run.json").write_text(json.dumps(run))
print(json.dumps(run))
PY
  # a finished run is never resumed: its optimizer state goes (~2-4 GB each); a cut one keeps it for `resume`
  if [ "$rc" -eq 0 ]; then rm -rf "$dir"/checkpoints/step_*/policy; fi
  rl_eval "$name" "$seed"  # at once: runs that end early are evaluated while the others train
}

# the held-out evaluation of a run's last checkpoint on VAL chains of the test split, into that run's own store (21 at
# once: one SQLite each)
rl_eval() {
  local name=$1 seed=$2 dir=$RL/$1/seed$2 ckpt
  cd "$REPO"
  ckpt=$(last_checkpoints "$dir" | tail -n1)
  [ -n "$ckpt" ] || { echo "no checkpoint in $dir" >&2; return 0; }
  "${AGENTR1[@]}" eval "${JOB[@]}" "db=sqlite:///$dir/eval.db" "data.test_size=$VAL" --split test \
    --checkpoint "$ckpt/hf" --run-id "chains-$name-s$seed-eval" 2> "$dir/eval.log" | tail -n1 > "$dir/eval.json" || true
  echo "{\"step\": ${ckpt##*step_}}" > "$dir/eval_step.json"
  "${PY[@]}" scripts/gpu/episode_stats.py "$dir/eval.db" "chains-$name-s$seed-eval" "$dir/eval_stats.json" > /dev/null \
    || echo "no evaluation for $name seed $seed (eval.log)" >&2
}

# keep the newest complete checkpoint of every run, only its hf/ unless KEEP_RESUME=1 (then its optimizer state
# too, while more than MIN_FREE_GB are free); log memory, disk, load
prune_and_monitor() {
  local free
  while [ ! -f "$RUN/DONE" ]; do
    prune_checkpoints "$RL"/*/seed*  # (a complete checkpoint: its policy/ was written before it was renamed)
    free=$(df -BG --output=avail "$RUN" | tail -n1 | tr -dc 0-9)
    if [ "${free:-0}" -lt "${MIN_FREE_GB:-12}" ]; then  # the disk first: the runs lose `resume`, never their hf/
      echo "$(date +%T) only ${free} GB free: removing the optimizer state of every checkpoint" >> "$RUN/monitor.log"
      rm -rf "$RL"/*/seed*/checkpoints/step_*[0-9]/policy
    fi
    {
      echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) disk $(df -h /tmp | awk 'NR==2 {print $3 "/" $2}')" \
        "gpu $(nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu --format=csv,noheader 2>/dev/null || echo -)"
    } >> "$RUN/monitor.log"
    sleep 20
  done
}

stage_driver() {
  local deadline=${RL_DEADLINE:-$(($(date +%s) + RL_WALL_S))} name seed pruner
  rm -f "$RUN/DONE"
  stage "RL: $(echo $ESTIMATORS | wc -w) estimators x seeds $SEEDS, $RL_STEPS steps, training until $(date -d "@$deadline" +%T)"
  prune_and_monitor &
  pruner=$!
  for name in $ESTIMATORS; do
    for seed in $SEEDS; do
      if [ -f "$RL/$name/seed$seed/eval_stats.json" ] && last_json "$RL/$name/seed$seed/run.json" cut | grep -q False
      then continue  # trained and evaluated in an earlier driver
      fi
      while [ "$(jobs -rp | wc -l)" -gt "$MAX_PARALLEL" ]; do sleep 5; done  # (+1: the pruner)
      rl_run "$name" "$seed" "$deadline" &
    done
  done
  wait_for_children_but "$pruner"
  touch "$RUN/DONE"
  wait
  stage "done: every run trained and evaluated on the $VAL held-out chains of the test split"
}

# wait for every background job but the pruner ($1)
wait_for_children_but() {
  local pid
  for pid in $(jobs -p); do [ "$pid" = "$1" ] || wait "$pid" || true; done
}

launch_driver() {  # $1: when training must end (epoch seconds; default RL_WALL_S from now)
  mkdir -p "$RUN"
  rm -f "$RUN/DONE"  # (the driver removes it too, but the watch may look first)
  setsid nohup env OUT="$DEVICE_OUT" RUN="$RUN" RL_DEADLINE="${1:-}" bash "$0" driver > "$RUN/driver.log" 2>&1 < /dev/null &
  echo "RL driver started (pid $!): $RUN/driver.log"
}

stage_watch() {
  local until=$((CALL_START + ${1:-560})) left
  while left=$((until - $(date +%s))) && [ "$left" -gt 0 ] && [ ! -f "$RUN/DONE" ]; do
    sleep $((left < 30 ? left : 30))
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
  rm -rf "$RUN"/seed*/sft/checkpoints/step_*/policy  # RL starts from hf/; the SFT optimizer state is ~2 GB a seed
  launch_driver $((CALL_START + RL_TRAIN_END_S))
}

stage_collect() {  # $1: wait up to that many seconds for the driver to finish first
  local until=$((CALL_START + ${1:-0}))
  while [ ! -f "$RUN/DONE" ] && [ "$(date +%s)" -lt "$until" ]; do sleep 10; done
  [ -f "$RUN/DONE" ] || echo "collecting while the RL driver is still running: $(tail -n1 "$RUN/driver.log")"
  mkdir -p "$DEVICE_OUT"
  "${PY[@]}" -m examples.chains.estimators.compare "$OUT" --out "$DEVICE_OUT" --seeds $SEEDS \
    || echo "compare.py failed here: run it on the tarball (examples/chains/estimators/README.md)"
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
  collect) if [ "$DEVICE" = cpu ]; then PY=(.venv/bin/python); else PY=(python3); fi; stage_collect "${1:-0}" ;;
  *) echo "unknown stage $what" >&2; exit 2 ;;
esac; exit  # the driver outlives the call: bash must never read past here if the file is copied anew
