#!/usr/bin/env bash
# The whole laptop demo (examples/chains/demo.py: demonstrations, SFT, RL, held-out before/after) under several
# settings at once on a lent GPU, each REPS times, scored on the VAL split: for choosing the demo's settings (the
# claims are then made on test, on the CPU, with scripts/demo). GPU numbers differ from the CPU's (bfloat16 kernels
# here, float32 on an AVX2 CPU): a screen says which settings to confirm, not what the CPU demo does.
# Needs what scripts/gpu/lib.sh lists (the SmolLM2 parts; for --model qwen2.5-coder-0.5b also .q01-.q12).
#
#   scripts/gpu/demo_variants.sh start "NAME demo-args ..." "NAME2 ..."   (REPS=2 VAL=64 CACHE_GB=1.5)
#   scripts/gpu/demo_variants.sh collect SECONDS     wait, then $OUT/variants.jsonl: one line per run (name, rep,
#                                                    greedy and sampled before/after, per-task outcomes, wall time)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-2} VAL=${VAL:-64}
RUN=${RUN:-/tmp/agentr1-variants}
OUT=${OUT:-$PWD/out/demo-variants}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 AGENTR1_ENGINE_PROCESS=0
DEVICE=${DEVICE:-cuda}
if [ "$DEVICE" = cpu ]; then  # the dry run here
  PY=.venv/bin/python
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false LITELLM_LOCAL_MODEL_COST_MAP=True
else
  source scripts/gpu/lib.sh
  gpu_collect > /dev/null || exit 4
  gpu_env "$PWD/scripts/gpu/stubs"
  PY=python3
fi

case "${1:-}" in
  start)
    shift
    if [ "$DEVICE" != cpu ]; then
      gpu_smollm2 > /dev/null || exit 4
      case "$*" in *qwen2.5-coder-0.5b*) gpu_qwen05 > /dev/null || exit 4 ;; esac
    fi
    rm -rf "$RUN" && mkdir -p "$RUN"
    for setting in "$@"; do
      read -r name args <<< "$setting"
      for rep in $(seq 1 "$REPS"); do
        # shellcheck disable=SC2086
        setsid nohup "$PY" -m examples.chains.demo --device "$DEVICE" --split val --val "$VAL" \
          --out "$RUN/${name}_$rep" $args "trainer.seed=$rep" "actor_rollout_ref.rollout.engine.cache_gb=${CACHE_GB:-1.5}" \
          > "$RUN/${name}_$rep.log" 2>&1 < /dev/null &
      done
    done
    echo "launched $(( $# * REPS )) runs at $(date +%T)"
    ;;
  collect)
    until=$(( $(date +%s) + ${2:-500} ))
    while [ "$(date +%s)" -lt "$until" ] && pgrep -f "examples.chains.demo" > /dev/null; do
      sleep 20
      echo "$(date +%T) $(pgrep -fc "examples.chains.demo") running; $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>/dev/null)"
    done
    mkdir -p "$OUT"
    "$PY" - "$RUN" > "$OUT/variants.jsonl" <<'PY'
import json, sys
from pathlib import Path
for log in sorted(Path(sys.argv[1]).glob("*.log")):
    name, rep = log.stem.rsplit("_", 1)
    summary = log.with_suffix("") / "summary.json"
    row = {"name": name, "rep": int(rep)}
    if summary.is_file():
        s = json.loads(summary.read_text())
        row.update(wall_s=s["wall_s"], peak_rss_gb=s["peak_rss_gb"], train_success=s["train_success"])
        for d in ("greedy", "sampled"):
            if d in s:
                row[d] = {k: s[d][k] for k in ("before", "after", "per_task")}
        sft = log.with_suffix("") / "sft" / "metrics.jsonl"
        losses = [json.loads(x).get("sft/loss") for x in sft.read_text().splitlines() if x.strip()] if sft.is_file() else []
        row["sft_loss"] = [x for x in losses if x is not None][-1:]
    else:
        row["error"] = log.read_text()[-1500:]
    print(json.dumps(row))
PY
    "$PY" -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l); g = r.get("greedy", {}); t = r.get("sampled", {})
    print(r["name"], r["rep"], "greedy", g.get("before"), "->", g.get("after"), " T=1", t.get("before"), "->", t.get("after"), " sft_loss", r.get("sft_loss"), " wall", r.get("wall_s"), r.get("error", "")[-300:])' "$OUT/variants.jsonl"
    ;;
  *) echo "usage: $0 start SETTING ... | collect SECONDS" >&2; exit 2 ;;
esac
