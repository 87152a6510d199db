# Untrained -> SFT -> SFT+RL on one GPU, several seeds: the stages shared by alfworld_h200.sh, gsm8k_h200.sh and
# chains_h200.sh (compare_h200.sh uses its SFT stages). A recipe script sets, then sources this file from the
# repository root and calls `stages_main "$@"`:
#   RECIPE     short name (runs, folders)         TRAIN_CFG  the GPU RL config (its test split is the eval set)
#   SFT_CFG    the SFT config                     DEMOS_FN   module:function returning the expert demonstrations
#   DEMOS EPOCHS RL_STEPS VAL   demonstrations, SFT epochs, GRPO steps, held-out tasks of every evaluation
#              (environment overrides; VAL sets data.test_size and data.val_size)
#   SWEEP      SFT budgets to try (numbers of demonstrations), for `sweep` and for `start` when set
#   RL_ARGS    extra key=value overrides of the RL run (space-separated), e.g. "actor_rollout_ref.rollout.n=4"
#   JOB_ARGS   extra key=value overrides of every evaluation and of the RL run, e.g. "agent.timeout_s=3600"
#   CACHE_GB   GiB of KV cache per serving engine (default 8 on a GPU: several runs share it; the engine's own
#              default takes a quarter of the memory free at its start)
#   EVAL_ARGS  flags of every held-out evaluation, e.g. "--greedy --n 8 --temperature 1" (the protocol of
#              docs/evaluation.md: greedy@1, mean@8, pass@8); each evaluation also writes its tasks' outcomes to
#              <result>_tasks.json, so two checkpoints' evaluations pair up (agentr1.trainer.compare_evaluations)
#   BASE       0: the pipeline skips the untrained policy's evaluation (default 1)
#
# The whole pipeline in the background (one device call runs at most 10 minutes; the pipeline outlives them):
#   <script> start [WATCH_S]   launch `pipeline` (setsid) and watch it until WATCH_S s after the call began (560)
#   <script> watch [WATCH_S]   watch it until it is done or WATCH_S s after the call began (560)
#   <script> collect [WAIT_S]  wait up to WAIT_S s for it to end; then summary.json, the figure, a tarball of every
#                              result file and one of the evaluation stores (for `agentr1 view`) into $OUT
#   <script> pipeline          what `start` launches: the untrained evaluation and the demonstrations at once;
#                              with SWEEP, SFT of seed 1 on each budget at once, then DEMOS := the budget whose
#                              success on the val split is nearest TARGET (0.35; sweep_choice.json says which and why);
#                              SFT of every seed at once; each seed's RL as soon as its SFT is done, all at once,
#                              until RL_STEPS or PIPELINE_S (1500) s after the launch, whichever comes first; then
#                              each RL run's last checkpoint on the held-out tasks; summary and figure
# One stage at a time (each in its own call; `all` runs them in turn):
#   <script> base          the untrained policy on VAL held-out tasks of the test split
#   <script> demos         the expert's DEMOS demonstrations replayed into the store (once; shared by the seeds)
#   <script> sft SEED      SFT (data order and init seeded), then the SFT checkpoint on the held-out tasks
#   <script> rl SEED       GRPO from that seed's SFT checkpoint, then its last checkpoint on the held-out tasks
#                          (LIMIT_S: the training command's time limit, GPU default 540 s; it saves every SAVE_FREQ
#                          (5) steps and `rl SEED` again resumes it)
#   <script> sweep         for each n in SWEEP: SFT (seed 1) on the first n demonstrations and its success on the val
#                          split (a setting is chosen on val, never on test)
#   <script> all           base, demos, then sft and rl for each of $SEEDS (default "1 2 3"), then summary and plot
#   <script> summary       $RESULTS/summary.json: per stage the held-out success of each seed, mean and spread
#   <script> plot          $RESULTS/${RECIPE}_curves.png: held-out success per stage and seed, the RL runs' curves
# $RUN (/tmp/agentr1-$RECIPE) keeps the stores, checkpoints and $RESULTS ($RUN/results) between calls; `collect`
# packs the results into $OUT (default out/gpu-$RECIPE). Every evaluation has a store of its own
# ($RUN/evals/<run id>.db): small enough to bring back and open in the viewer.
# Evaluation: `agentr1 eval --split test` (tasks held out from training and from choosing settings: the split for
# claims; docs/evaluation.md), one sample per task at the configs' rollout temperature (1.0), unless EVAL_ARGS says
# otherwise; the sweep's evaluations run on the val split (they choose DEMOS).
# DEVICE=cpu runs the same stages on this machine with .venv (a dry run: add MODEL=<a tiny model dir> and small
# sizes); MODEL replaces the starting model (SmolLM2-135M-Instruct) of both SFT and the untrained evaluation.
OUT=${OUT:-$PWD/out/gpu-$RECIPE}
RUN=${RUN:-/tmp/agentr1-$RECIPE}
RESULTS=${RESULTS:-$RUN/results}
SEEDS=${SEEDS:-1 2 3}
DB="sqlite:///$RUN/traces.db"
DEVICE=${DEVICE:-cuda}
TARGET=${TARGET:-0.35}
PIPELINE_S=${PIPELINE_S:-1500}
REPO=$PWD  # the pipeline outlives the call: its processes cd here again (by path) should the tree be laid anew

stages_setup() {
  mkdir -p "$RESULTS" "$RUN/evals"
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
  JOB=("$TRAIN_CFG" "data.val_size=$VAL" "trainer.device=$DEVICE" ${JOB_ARGS:-})
  if [ "$DEVICE" != cpu ]; then JOB+=("actor_rollout_ref.rollout.engine.cache_gb=${CACHE_GB:-8}"); fi
  SFT_MODEL=()
  if [ -n "${MODEL:-}" ]; then JOB+=("actor_rollout_ref.model=$MODEL"); SFT_MODEL=("model.path=$MODEL"); fi
}

stage() { echo; echo "== $RECIPE: $* ($(date +%T))"; }
# evaluate on VAL held-out tasks of split $3 (test: the claims'; val: for choosing a setting) into run $1 (in a
# store of its own), result line to $2 (extra arguments: --checkpoint DIR); a crash of the process after it printed
# its result (seen on an overloaded CPU) does not lose the result
held_out_eval() {
  local run_id=$1 out=$2 split=$3 db=$RUN/evals/$1.db
  shift 3
  rm -f "$db"  # an evaluation again (a resumed stage) starts its store anew
  # shellcheck disable=SC2086
  "${AGENTR1[@]}" eval "${JOB[@]}" "db=sqlite:///$db" "data.test_size=$VAL" "$@" --split "$split" ${EVAL_ARGS:-} \
    --output "${out%.json}_tasks.json" --run-id "$run_id" | tail -n1 | tee "$out" || true
  grep -q '"success"' "$out" || { echo "evaluation $run_id gave no result" >&2; return 1; }
  basename "$db" > "${out%.json}_store.txt"
  "${PY[@]}" scripts/gpu/episode_stats.py "$db" "$run_id" "${out%.json}_stats.json"
}

last_json() { "${PY[@]}" -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])' "$@"; }

# the complete checkpoints of a training run's folder, oldest first (none: nothing, and no error)
last_checkpoints() {
  local ck
  for ck in "$1"/checkpoints/step_*; do
    case $ck in *.partial) continue ;; esac  # a save in progress
    [ -f "$ck/trainer_state.json" ] && echo "${ck##*step_} $ck"
  done | sort -n | cut -d' ' -f2- || true
}

# keep only the newest complete checkpoint of each training folder given, and of it only hf/ (what evaluations
# and the next stage load) unless KEEP_RESUME=1: a checkpoint of SmolLM2-135M is ~0.6 GB of hf/ and ~1.7 GB of
# optimizer state, and the trainer keeps every one
prune_checkpoints() {
  local run ck
  for run in "$@"; do
    last_checkpoints "$run" | head -n -1 | while read -r ck; do rm -rf "$ck"; done
    if [ "${KEEP_RESUME:-0}" = 0 ]; then rm -rf "$run"/checkpoints/step_*[0-9]/policy; fi
  done
}

stage_base() {
  stage "untrained policy on $VAL held-out tasks (test split)"
  held_out_eval "$RECIPE-base" "$RESULTS/base.json" test
}

# the first N ($1, default DEMOS) expert demonstrations, replayed into the store as run $RECIPE-demos-n<N> (once)
stage_demos() {
  local n=${1:-$DEMOS}
  [ -f "$RESULTS/demos-n$n.json" ] && grep -q . "$RESULTS/demos-n$n.json" && return
  stage "$n expert demonstrations ($DEMOS_FN)"
  "${PY[@]}" -m agentr1.trainer.sft.replay "$DEMOS_FN" "n=$n" --db "$RUN/traces.db" --run-id "$RECIPE-demos-n$n" \
    | tee "$RESULTS/demos-n$n.json"
}

# SFT seed $1 on the first $2 (default DEMOS) demonstrations, results into $3 (default $RESULTS/seed$1), then the
# SFT checkpoint on the held-out tasks of split $4 (default test)
stage_sft() { sft_train "$@" && sft_eval "$@"; }

sft_train() {
  local seed=${1:?seed} n=${2:-$DEMOS} dir=${3:-$RESULTS/seed$1}
  local ckpts=$RUN/${dir#"$RESULTS"/}/sft
  mkdir -p "$dir"
  stage_demos "$n"
  stage "SFT, seed $seed, $n demonstrations ($EPOCHS epochs)"
  "${AGENTR1[@]}" sft "$SFT_CFG" "data.db=$DB" "data.run_ids=[$RECIPE-demos-n$n]" "data.seed=$seed" "trainer.seed=$seed" \
    "trainer.total_epochs=$EPOCHS" "trainer.device=$DEVICE" "trainer.default_local_dir=$ckpts" "${SFT_MODEL[@]}" \
    --quiet | tee "$dir/sft.json"
  cp "$ckpts/metrics.jsonl" "$dir/sft_metrics.jsonl"
  echo "{\"demos\": $n, \"seed\": $seed}" > "$dir/budget.json"
}

sft_eval() {
  local seed=${1:?seed} n=${2:-$DEMOS} dir=${3:-$RESULTS/seed$1} split=${4:-test}
  local name=${dir#"$RESULTS"/}
  stage "SFT checkpoint of seed $seed ($n demonstrations) on $VAL held-out tasks ($split split)"
  held_out_eval "$RECIPE-sft-${name//\//-}" "$dir/sft_eval.json" "$split" \
    --checkpoint "$(last_json "$dir/sft.json" checkpoint)"
}

# GRPO from seed $1's SFT checkpoint, until RL_STEPS or the limit ($2 seconds, default LIMIT_S); then the last
# checkpoint on the test split's held-out tasks (the training run's own evaluations use one val task: the held-out
# ones come after)
stage_rl() {
  local seed=${1:?seed} limit_s=${2:-${LIMIT_S:-0}} dir=$RESULTS/seed$1
  local rl=$RUN/seed$seed/rl limit=() ckpt
  stage "GRPO from the SFT checkpoint of seed $seed, $RL_STEPS steps"
  mkdir -p "$rl" "$dir"  # an existing run resumes from its last checkpoint (delete $rl to start over)
  if [ "$limit_s" -gt 0 ]; then limit=(timeout --signal=INT --kill-after=30 "$limit_s"); fi
  "${limit[@]}" "${AGENTR1[@]}" train "${JOB[@]}" "db=sqlite:///$rl/traces.db" "data.val_size=1" \
    "run_name=$RECIPE-rl-s$seed" "actor_rollout_ref.model=$(last_json "$dir/sft.json" checkpoint)" "trainer.seed=$seed" \
    "trainer.total_training_steps=$RL_STEPS" "trainer.default_local_dir=$rl" "trainer.save_freq=${SAVE_FREQ:-5}" \
    ${RL_ARGS:-} --quiet > "$dir/rl.log" 2>&1 || echo "the RL run of seed $seed ended early (rl.log): $(tail -n1 "$dir/rl.log")"
  cp "$rl/metrics.jsonl" "$dir/rl_metrics.jsonl" 2>/dev/null || true
  cp "$rl/curves.png" "$dir/rl_curves.png" 2>/dev/null || true
  ckpt=$(last_checkpoints "$rl" | tail -n1)
  [ -n "$ckpt" ] || { echo "no RL checkpoint of seed $seed in $rl" >&2; return 1; }
  echo "{\"step\": ${ckpt##*step_}, \"steps_wanted\": $RL_STEPS}" > "$dir/rl_step.json"
  stage "RL checkpoint of seed $seed (step ${ckpt##*step_}) on $VAL held-out tasks (test split)"
  held_out_eval "$RECIPE-rl-s$seed" "$dir/rl_eval.json" test --checkpoint "$ckpt/hf"
}

stage_summary() {
  "${PY[@]}" - "$RESULTS" $SEEDS <<'PY'
import json, statistics, sys
from pathlib import Path
out, seeds = Path(sys.argv[1]), sys.argv[2:]
def read(path):
    p = out / path
    return json.loads(p.read_text().strip().splitlines()[-1]) if p.exists() and p.read_text().strip() else None
def spread(values):
    values = [v for v in values if v is not None]
    return {"per_seed": values, "mean": statistics.mean(values) if values else None,
            "min": min(values, default=None), "max": max(values, default=None)}
stages = {"untrained": [read("base_stats.json")],
          "sft": [read(f"seed{s}/sft_eval_stats.json") for s in seeds],
          "sft_rl": [read(f"seed{s}/rl_eval_stats.json") for s in seeds]}
summary = {"seeds": seeds, "temperature": 1.0,
           "demos": [(read(f"seed{s}/budget.json") or {}).get("demos") for s in seeds],
           "rl_steps": [read(f"seed{s}/rl_step.json") for s in seeds],
           "sweep": read("sweep_choice.json")}
for name, rows in stages.items():
    summary[name] = {k: spread([r.get(k) if r else None for r in rows])
                     for k in ("success", "tool_calls_per_episode", "episodes_with_tool_calls", "tool_calls_per_success",
                               "steps_per_episode", "sessions")}
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary, indent=1))
PY
}

stage_sweep() {
  local n
  stage "sweep: SFT on the first n demonstrations, n in ${SWEEP:?set SWEEP, e.g. \"32 64 128\"} ($EPOCHS epochs, seed 1)"
  for n in $SWEEP; do stage_sft 1 "$n" "$RESULTS/sweep/n$n" val; done
}

# DEMOS := the swept budget whose success on the val split is nearest TARGET; sweep_choice.json records the sweep
choose_budget() {
  "${PY[@]}" - "$RESULTS" "$TARGET" $SWEEP <<'PY'
import json, sys
from pathlib import Path
out, target, budgets = Path(sys.argv[1]), float(sys.argv[2]), [int(n) for n in sys.argv[3:]]
success = {}
for n in budgets:
    p = out / "sweep" / f"n{n}" / "sft_eval_stats.json"
    if p.exists():
        success[n] = json.loads(p.read_text())["success"]
if not success:
    raise SystemExit("no SFT budget of the sweep was evaluated")
chosen = min(success, key=lambda n: (abs(success[n] - target), n))
(out / "sweep_choice.json").write_text(json.dumps({"target": target, "success": success, "chosen": chosen}))
print(chosen)
PY
}

stage_plot() {  # after summary
  "${PY[@]}" - "$RESULTS" "$RECIPE" <<'PY'
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
    points = [(r["step"], r["success/train"]) for r in rows if r.get("success/train") is not None]
    if points:
        right.plot(*zip(*points), marker=".", label=f"seed {seed}")
right.set_xlabel("GRPO step from the SFT checkpoint")
right.set_ylabel("training-batch success")
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

# one seed of the pipeline: SFT (unless the sweep made it), then RL until the deadline ($2) with the SFT
# checkpoint's evaluation beside it, then the RL checkpoint's evaluation
pipeline_seed() {
  local seed=$1 deadline=$2 evaluation=
  cd "$REPO"
  if [ ! -f "$RESULTS/seed$seed/sft.json" ]; then
    sft_train "$seed" "$DEMOS" > "$RUN/sft_s$seed.log" 2>&1 || { echo "SFT of seed $seed failed ($RUN/sft_s$seed.log)"; return 1; }
  fi
  if [ ! -s "$RESULTS/seed$seed/sft_eval.json" ]; then  # (the sweep evaluated its seed-1 run on val, not test)
    sft_eval "$seed" "$DEMOS" > "$RUN/sft_eval_s$seed.log" 2>&1 &
    evaluation=$!
  fi
  stage_rl "$seed" $((deadline - $(date +%s))) > "$RUN/rl_s$seed.log" 2>&1 || echo "RL of seed $seed failed ($RUN/rl_s$seed.log)"
  [ -z "$evaluation" ] || wait "$evaluation" || echo "the SFT evaluation of seed $seed failed ($RUN/sft_eval_s$seed.log)"
}

stage_pipeline() {
  local deadline=$((CALL_START + PIPELINE_S)) seed pids=() n base pruner
  rm -f "$RUN/DONE"
  stage "pipeline: seeds $SEEDS, $RL_STEPS RL steps, training until $(date -d "@$deadline" +%T)"
  (while [ ! -f "$RUN/DONE" ]; do prune_checkpoints "$RUN"/seed*/rl "$RUN"/seed*/sft "$RUN"/sweep/n*/sft; sleep 20; done) &
  pruner=$!
  base=
  if [ "${BASE:-1}" != 0 ]; then stage_base > "$RUN/base.log" 2>&1 & base=$!; fi
  if [ -n "${SWEEP:-}" ]; then
    for n in $SWEEP; do stage_demos "$n" > "$RUN/demos_n$n.log" 2>&1; done  # one at a time: one store
    for n in $SWEEP; do
      (cd "$REPO"; stage_sft 1 "$n" "$RESULTS/sweep/n$n" val > "$RUN/sweep_n$n.log" 2>&1) &
      pids+=($!)
    done
    for n in "${pids[@]}"; do wait "$n" || true; done
    DEMOS=$(choose_budget) || { echo "the sweep gave no budget"; touch "$RUN/DONE"; return 1; }
    stage "sweep: $(cat "$RESULTS/sweep_choice.json") -> DEMOS=$DEMOS"
    mkdir -p "$RESULTS/seed1"
    cp "$RESULTS/sweep/n$DEMOS"/* "$RESULTS/seed1/"  # seed 1's SFT is the sweep's run at that budget
    rm -f "$RESULTS/seed1"/sft_eval*  # its evaluation on val chose the budget; pipeline_seed evaluates it on test
  else
    stage_demos "$DEMOS" > "$RUN/demos.log" 2>&1
  fi
  pids=()
  for seed in $SEEDS; do
    pipeline_seed "$seed" "$deadline" &
    pids+=($!)
  done
  for n in "${pids[@]}" $base; do wait "$n" || true; done
  stage_summary > /dev/null
  stage_plot > /dev/null || true
  stage "pipeline done"
  touch "$RUN/DONE"
  wait "$pruner" || true
}

stage_start() {
  mkdir -p "$RUN"
  rm -f "$RUN/DONE"
  setsid nohup env OUT="$OUT" RUN="$RUN" CALL_START="$CALL_START" bash "$0" pipeline > "$RUN/pipeline.log" 2>&1 < /dev/null &
  echo "pipeline started (pid $!): $RUN/pipeline.log"
}

stage_watch() {
  local until=$((CALL_START + ${1:-560})) left seed
  while left=$((until - $(date +%s))) && [ "$left" -gt 0 ] && [ ! -f "$RUN/DONE" ]; do
    sleep $((left < 30 ? left : 30))
    echo "$(date +%T) $(grep '^==' "$RUN/pipeline.log" 2>/dev/null | tail -n1)"
    for seed in $SEEDS; do
      tail -n1 "$RUN/seed$seed/rl/metrics.jsonl" 2>/dev/null | "${PY[@]}" -c 'import json, sys
r = json.loads(sys.stdin.read())
print(f"   seed {sys.argv[1]} step {r.get('"'step'"')}: {r.get('"'perf/step_s'"', 0):.0f} s a step, "
      f"train success {r.get('"'success/train'"', 0):.2f}")' "$seed" || true
    done
    nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>/dev/null | sed 's/^/   gpu /' || true
  done
  [ -f "$RUN/DONE" ] && echo "pipeline: done" || echo "pipeline: still running"
}

stage_collect() {  # $1: wait up to that many seconds (from the call's start) for the pipeline to end first
  local until=$((CALL_START + ${1:-0}))
  while [ ! -f "$RUN/DONE" ] && [ "$(date +%s)" -lt "$until" ]; do sleep 10; done
  [ -f "$RUN/DONE" ] || { echo "collecting while the pipeline still runs"; stage_summary > /dev/null || true; stage_plot || true; }
  mkdir -p "$OUT"
  cp "$RESULTS/summary.json" "$OUT/${RECIPE}_summary.json" 2>/dev/null || true
  cp "$RESULTS/${RECIPE}_curves.png" "$OUT/" 2>/dev/null || true
  (cd "$RESULTS" && find . \( -name '*.json' -o -name '*.jsonl' -o -name '*.log' -o -name '*.png' \) -size -20M -print0 \
    | tar czf "$OUT/${RECIPE}_results.tgz" --null -T - -C "$RUN" $(cd "$RUN" && ls ./*.log 2>/dev/null)) || true
  # the untrained, and seed 1's SFT and SFT+RL evaluations (all of them would exceed what a device call returns)
  (cd "$RUN/evals" && tar czf "$OUT/${RECIPE}_eval_stores.tgz" $(cat "$RESULTS"/base_store.txt \
    "$RESULTS"/seed1/sft_eval_store.txt "$RESULTS"/seed1/rl_eval_store.txt 2>/dev/null)) || true
  ls -la "$OUT"
}

stages_main() {
  local what=${1:?start, watch, collect, base, demos, sft SEED, rl SEED, sweep, all, summary or plot}
  shift || true
  CALL_START=${CALL_START:-$(date +%s)}
  if [ "$DEVICE" = cpu ]; then PY=(.venv/bin/python); else PY=(python3); fi
  case "$what" in
    summary) stage_summary; return ;;
    plot) stage_plot; return ;;
    collect) stage_collect "$@"; return ;;
    watch) stage_watch "$@"; return ;;
  esac
  stages_setup
  case "$what" in
    start) stage_start; stage_watch "$@" ;;
    pipeline) stage_pipeline ;;
    base) stage_base ;;
    demos) stage_demos ;;
    sft) stage_sft "$@" ;;
    rl) stage_rl "$@" ;;
    sweep) stage_sweep ;;
    all)
      stage_base
      for seed in $SEEDS; do stage_sft "$seed"; stage_rl "$seed"; done
      stage_summary
      stage_plot ;;
    *) echo "unknown stage $what" >&2; exit 2 ;;
  esac
}
