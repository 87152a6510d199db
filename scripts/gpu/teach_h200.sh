#!/usr/bin/env bash
# Does RL teach what the warm start cannot do (issue 44, part 3)? On one H200: the chains expert's clean two-step
# demonstrations (examples/chains/expert.py, short chains), SFT for each seed, then for each design GRPO from that
# SFT checkpoint on tasks the demonstrations never show how to solve (examples/chains/tasks.py):
#   retry   make_retry_tasks: the calculator answers "busy" at one call of each episode; success needs that call again
#   length  make_length_tasks: RL on 2- and 3-operation chains, held out on 3-operation chains
# Every SFT and SFT+RL checkpoint is evaluated on VAL held-out tasks of the test split (`agentr1 eval --split test`:
# disjoint from every training and demonstration chain and from the val chains by construction;
# tests/recipes/test_chains_teach.py) greedily (the rows' temperature 0, one sample) and with K samples at
# temperature 1 (mean@K, pass@K by the unbiased estimator), by `agentr1 eval`'s protocol.
# Needs what scripts/gpu/lib.sh lists (scripts/gpu/prepare.sh; carry .whl .tok, then .m1, .m2, .m3 in calls of
# their own: `teach_h200.sh carry`).
#
#   teach_h200.sh carry               copy what this call carried to /tmp (and install the wheels)
#   teach_h200.sh start [WATCH_S]     launch the pipeline in the background (setsid: it outlives the call) and watch
#                                     it until WATCH_S s after the call began (default 560)
#   teach_h200.sh watch [WATCH_S]     watch it until it is done or WATCH_S s after the call began
#   teach_h200.sh collect [WAIT_S]    wait up to WAIT_S s for it to end, then $OUT/teach.jsonl (one line per
#                                     evaluation), $OUT/rl_metrics.jsonl (every RL step of every run) and the table
# Settings (environment): SEEDS ("1 2 3"), DESIGNS ("retry length"), DEMOS (12), SFT_BATCH (2), SFT_LR (5e-5),
# VAL (128), K (8), RL_STEPS (60), TRAIN_END_S (RL stops this many s after `start` began, whatever step it reached:
# 780), SAVE_FREQ (3), RL_ARGS (overrides of every RL run), VARIANTS ("base": names of RL settings, each
# VARIANT_<name> its overrides; every design x seed x variant is one run), CACHE_GB (2). DEVICE=cpu MODEL=<tiny
# model dir> with small sizes is a dry run on this machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
CALL_START=${CALL_START:-$(date +%s)}
SEEDS=${SEEDS:-1 2 3} DESIGNS=${DESIGNS:-retry length} DEMOS=${DEMOS:-12} SFT_BATCH=${SFT_BATCH:-2}
SFT_LR=${SFT_LR:-5e-5} VAL=${VAL:-128} K=${K:-8} RL_STEPS=${RL_STEPS:-60} TRAIN_END_S=${TRAIN_END_S:-780}
SAVE_FREQ=${SAVE_FREQ:-3} VARIANTS=${VARIANTS:-base} CACHE_GB=${CACHE_GB:-2}
RUN=${RUN:-/tmp/agentr1-teach}
OUT=${OUT:-$PWD/out/teach}
RECIPE=teach DEVICE=${DEVICE:-cuda} MODEL=${MODEL:-smollm2}
source scripts/gpu/stages.sh  # last_json, last_checkpoints, prune_checkpoints
if [ "$DEVICE" = cpu ]; then PY=(.venv/bin/python); else PY=(python3); fi
DEVICE_ARGS=("trainer.device=$DEVICE")
if [ "$DEVICE" != cpu ]; then DEVICE_ARGS+=("actor_rollout_ref.rollout.engine.cache_gb=$CACHE_GB"); fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
export AGENTR1_ENGINE_PROCESS=${AGENTR1_ENGINE_PROCESS:-0}  # each run's engine in its own process: fewer CUDA contexts

generator_of() { case $1 in retry) echo examples.chains.tasks:make_retry_tasks ;; length) echo examples.chains.tasks:make_length_tasks ;; *) echo "unknown design $1" >&2; return 1 ;; esac; }

setup() {
  if [ "$DEVICE" = cpu ]; then  # a dry run here: MODEL=<a tiny model dir> and small sizes
    AGENTR1=(.venv/bin/agentr1)
    export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false LITELLM_LOCAL_MODEL_COST_MAP=True
    return
  fi
  source scripts/gpu/lib.sh
  gpu_collect > /dev/null || exit 4
  gpu_env "$REPO/scripts/gpu/stubs"
  gpu_smollm2 > /dev/null || exit 4
}

# evaluate checkpoint $3 on VAL held-out tasks of design $2's test split as $1 under the protocol (`agentr1 eval`:
# greedy@1, and K samples a task at temperature 1: mean@K, pass@K), then the episodes' retries (retry_stats.py);
# tags $4 (JSON)
evaluate() {
  local name=$1 design=$2 ckpt=$3 tags=$4
  "${AGENTR1[@]}" eval examples/chains/teach_gpu.yaml "db=sqlite:///$RUN/evals/$name.db" \
    "data.generator=$(generator_of "$design")" "data.val_size=$VAL" "data.test_size=$VAL" "${DEVICE_ARGS[@]}" \
    --checkpoint "$ckpt" --split test --greedy --n "$K" --temperature 1.0 --run-id "$name" \
    --output "$RUN/evals/$name.json" > /dev/null \
    2> "$RUN/logs/eval-$name.log" || { echo "evaluation $name failed ($RUN/logs/eval-$name.log)"; return 1; }
  "${PY[@]}" scripts/gpu/retry_stats.py "$RUN/evals/$name.db" "$name" > "$RUN/evals/$name.retries.json"
  "${PY[@]}" - "$RUN/evals/$name.json" "$RUN/evals/$name.retries.json" "$tags" > "$RUN/results/$name.json" <<'PY'
import json, sys
answer, retries, tags = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), json.loads(sys.argv[3])
metrics = {k.split("/acc/", 1)[1]: v for k, v in answer.items() if "/acc/" in k}  # val-core/<source>/acc/<metric>
tasks = [{"task": t.get("task_id", t.get("task")), "greedy": t.get("greedy"), "samples": t.get("samples")}
         for t in answer.get("tasks_detail", [])]
print(json.dumps({**tags, "model": answer.get("model"), "metrics": metrics, "episodes": retries, "tasks": tasks}))
PY
}

# GRPO for design $1 from seed $2's SFT checkpoint $3 with variant $4 until RL_STEPS or the deadline; then evaluate
rl_run() {
  local design=$1 seed=$2 sft=$3 variant=$4 dir=$RUN/rl/$1-$4-s$2 left ckpt overrides
  mkdir -p "$dir"
  overrides="VARIANT_$variant"
  left=$((CALL_START + TRAIN_END_S - $(date +%s)))
  [ "$left" -gt 30 ] || { echo "no time left for $dir"; return; }
  # shellcheck disable=SC2086
  timeout --signal=INT --kill-after=30 "$left" "${AGENTR1[@]}" train examples/chains/teach_gpu.yaml \
    "db=sqlite:///$dir/traces.db" "data.generator=$(generator_of "$design")" data.val_size=1 trainer.test_freq=0 \
    "run_name=teach-$design-$variant-s$seed" "actor_rollout_ref.model=$sft" "trainer.seed=$seed" \
    "trainer.total_training_steps=$RL_STEPS" "trainer.save_freq=$SAVE_FREQ" "trainer.default_local_dir=$dir" \
    "${DEVICE_ARGS[@]}" ${RL_ARGS:-} ${!overrides:-} --quiet > "$RUN/logs/rl-$design-$variant-s$seed.log" 2>&1 || true
  ckpt=$(last_checkpoints "$dir" | tail -n1)
  [ -n "$ckpt" ] || { echo "no RL checkpoint in $dir"; return 1; }
  evaluate "rl-$design-$variant-s$seed" "$design" "$ckpt/hf" \
    "{\"design\": \"$design\", \"variant\": \"$variant\", \"seed\": $seed, \"stage\": \"sft_rl\", \"rl_step\": ${ckpt##*step_}}"
}

seed_pipeline() {
  local seed=$1 sft design variant
  cd "$REPO"
  mkdir -p "$RUN/s$seed"
  "${AGENTR1[@]}" sft examples/chains/sft.yaml "data.db=sqlite:///$RUN/demos.db" data.run_ids=[chains-demos] \
    "data.seed=$seed" "trainer.seed=$seed" trainer.total_epochs=1 "data.train_batch_size=$SFT_BATCH" "optim.lr=$SFT_LR" \
    "trainer.device=$DEVICE" "trainer.default_local_dir=$RUN/s$seed/sft" "model.path=$MODEL" --quiet \
    > "$RUN/s$seed/sft.json" 2> "$RUN/logs/sft-s$seed.log" || { echo "SFT of seed $seed failed"; return 1; }
  sft=$(last_json "$RUN/s$seed/sft.json" checkpoint)
  for design in $DESIGNS; do
    evaluate "sft-$design-s$seed" "$design" "$sft" "{\"design\": \"$design\", \"seed\": $seed, \"stage\": \"sft\"}" &
    for variant in $VARIANTS; do rl_run "$design" "$seed" "$sft" "$variant" & done
  done
  wait
}

pipeline() {
  local seed pruner pids=()
  setup
  rm -rf "$RUN/results" "$RUN/logs" "$RUN/evals" "$RUN/rl" "$RUN/DONE" && mkdir -p "$RUN/results" "$RUN/logs" "$RUN/evals" "$RUN/rl"
  echo "== pipeline: seeds $SEEDS, designs $DESIGNS, variants $VARIANTS; RL until $(date -d "@$((CALL_START + TRAIN_END_S))" +%T)"
  "${PY[@]}" -m agentr1.trainer.sft.replay examples.chains.expert:demonstrations "n=$DEMOS" size=short \
    --db "$RUN/demos.db" --run-id chains-demos --model "$MODEL" > "$RUN/logs/demos.log" 2>&1
  (while [ ! -f "$RUN/DONE" ]; do KEEP_RESUME=0 prune_checkpoints "$RUN"/rl/*; sleep 15; done) &
  pruner=$!
  for seed in $SEEDS; do seed_pipeline "$seed" & pids+=($!); done
  for seed in "${pids[@]}"; do wait "$seed" || true; done
  echo "== pipeline done $(date +%T)"
  touch "$RUN/DONE"
  wait "$pruner" || true
}

table() {
  "${PY[@]}" - "$RUN" "$OUT" <<'PY'
import json, sys
from pathlib import Path
run, out = Path(sys.argv[1]), Path(sys.argv[2])
rows = [json.loads(p.read_text()) for p in sorted((run / "results").glob("*.json")) if p.read_text().strip()]
(out / "teach.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
curves = []
for d in sorted((run / "rl").glob("*")):
    metrics = d / "metrics.jsonl"
    for line in (metrics.read_text().splitlines() if metrics.exists() else []):
        if line.strip():
            curves.append({"run": d.name, **json.loads(line)})
(out / "rl_metrics.jsonl").write_text("".join(json.dumps(c) + "\n" for c in curves))
print("design  variant seed stage   step  greedy@1  mean@K  pass@K  retried(greedy, T=1)  calls/ep(greedy)")
key = lambda r: (r["design"], r["seed"], r["stage"], r.get("variant", "-"))
for r in sorted(rows, key=key):
    m, e = r["metrics"], r["episodes"]
    pick = lambda prefix: next((v for k, v in m.items() if k.startswith(prefix) and "/ci_" not in k), None)
    fmt = lambda v: "  -   " if v is None else f"{v:6.3f}"
    print(f"{r['design']:7} {r.get('variant', '-'):7} {r['seed']:4} {r['stage']:7} {str(r.get('rl_step', '')):5} "
          f"{fmt(pick('greedy@1'))}    {fmt(pick('mean@'))}  {fmt(pick('pass@'))}  {fmt(e['greedy']['retried'])} "
          f"{fmt(e['sampled']['retried'])}       {fmt(e['greedy']['tool_calls_per_episode'])}")
PY
}

watch() {
  local until=$((CALL_START + ${1:-560})) left
  while left=$((until - $(date +%s))) && [ "$left" -gt 0 ] && [ ! -f "$RUN/DONE" ]; do
    sleep $((left < 45 ? left : 45))
    echo "$(date +%T) results $(ls "$RUN/results" 2>/dev/null | wc -l); $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>/dev/null)"
    for m in "$RUN"/rl/*/metrics.jsonl; do
      [ -f "$m" ] && tail -n1 "$m" | "${PY[@]}" -c 'import json, sys
r = json.loads(sys.stdin.read()); print(f"   {sys.argv[1]}: step {r.get(\"step\")}, {r.get(\"perf/step_s\", 0):.0f} s a step, train success {r.get(\"success/train\", 0):.2f}")' "$(basename "$(dirname "$m")")" || true
    done
  done
  [ -f "$RUN/DONE" ] && echo "pipeline: done" || echo "pipeline: still running"
}

case ${1:-} in
  carry) source scripts/gpu/lib.sh; gpu_collect ;;
  start)
    mkdir -p "$RUN"
    setsid nohup env CALL_START="$CALL_START" RUN="$RUN" bash "$0" pipeline > "$RUN/pipeline.log" 2>&1 < /dev/null &
    shift; watch "$@" ;;
  pipeline) pipeline ;;
  watch) shift; watch "$@" ;;
  collect)
    until=$((CALL_START + ${2:-0}))
    while [ ! -f "$RUN/DONE" ] && [ "$(date +%s)" -lt "$until" ]; do sleep 10; done
    mkdir -p "$OUT"
    table | tee "$OUT/table.txt"
    cp "$RUN/pipeline.log" "$OUT/" 2>/dev/null || true
    (cd "$RUN/logs" && for f in *.log; do echo "== $f"; tail -n 8 "$f"; done) > "$OUT/log_tails.txt" 2>/dev/null || true ;;
  *) echo "usage: $0 carry | start [WATCH_S] | watch [WATCH_S] | collect [WAIT_S]" >&2; exit 2 ;;
esac
