#!/usr/bin/env bash
# On the H200 (issue 43), once sglang_serve.sh has a healthy SGLang: record the fixtures, then run the backend's
# real-server tests. Results in $OUT (at most 8 files come back):
#   sglang_fixtures.tgz     the real server's answers (tests/backends/fixtures/sglang/recorded/ once unpacked)
#   tests_sglang_real.log   pytest -v of tests/backends/test_sglang_real.py against the server (weights included)
#   sglang_serve.log        the server's log, its last 2,000 lines
#   summary.txt             what ran, how long
# Order: fixtures first (they end with weight updates and a failed load), the tests second.
#   SGLANG_RUN="record tests" (default: both)
set -uo pipefail
source scripts/gpu/lib.sh
source scripts/gpu/sglang_env.sh
OUT=${OUT:-$PWD/out/gpu}
mkdir -p "$OUT"
steps=${SGLANG_RUN:-record tests}
mode=$(cat "$SGLANG_WORK/serve.mode" 2> /dev/null || echo unknown)
summary=$OUT/summary.txt
say() { echo "$*" | tee -a "$summary"; }
say "SGLang 0.5.17 (attention $mode) at $SGLANG_URL serving $SGLANG_MODEL; $(date -u +%FT%TZ); steps: $steps"
python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' "$SGLANG_URL/health" \
  || { say "SGLang does not answer at $SGLANG_URL: run scripts/gpu/sglang_serve.sh first"; exit 1; }

if [[ " $steps " == *" record "* ]]; then
  t0=$SECONDS
  rm -rf "$SGLANG_WORK/fixtures"
  # SGLang's site first: the tensor update serializes with SGLang's own MultiprocessingSerializer
  PYTHONPATH="$SGLANG_SITE:$PWD/src" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 \
    python3 scripts/gpu/sglang_record.py --url "$SGLANG_URL" --model "$SGLANG_MODEL" --out "$SGLANG_WORK/fixtures" \
    --note "SGLang 0.5.17 (--attention-backend $mode --sampling-backend pytorch), $SGLANG_MODEL_LABEL, one $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)" \
    2>&1 | tee "$SGLANG_WORK/record.log"
  tar czf "$OUT/sglang_fixtures.tgz" -C "$SGLANG_WORK/fixtures" .
  say "record: $(ls "$SGLANG_WORK/fixtures" | wc -l) fixtures in $((SECONDS - t0)) s"
fi

if [[ " $steps " == *" tests "* ]]; then
  gpu_env
  t0=$SECONDS
  # the weights test reloads the served checkpoint (same weights), then fails a load of a missing one
  AGENTR1_SGLANG_URL=$SGLANG_URL AGENTR1_SGLANG_TOKENIZER=$SGLANG_MODEL AGENTR1_SGLANG_WEIGHTS=$SGLANG_MODEL \
    python3 -m pytest tests/backends/test_sglang_real.py -v -rA -p no:cacheprovider -s -o addopts="" \
    > "$OUT/tests_sglang_real.log" 2>&1
  say "tests: exit $? in $((SECONDS - t0)) s: $(tail -n 1 "$OUT/tests_sglang_real.log")"
fi
grep -m 8 -iE "attention backend|sampling backend|cuda graph|max_total_num_tokens|context_len|error" "$SGLANG_WORK/serve.log" >> "$summary"
tail -n 2000 "$SGLANG_WORK/serve.log" > "$OUT/sglang_serve.log"
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader >> "$summary"
exit 0
