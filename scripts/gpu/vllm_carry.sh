#!/usr/bin/env bash
# On the H200 (issue 19), first thing in every call of the vLLM sequence (docs/backends.md, "A real vLLM on
# the H200"): keep what this call carried in /tmp, which outlives the call while the machine stays warm,
# and start whatever the carried pieces now allow. Idempotent: a piece already done is not redone.
#
#   .whl/ .tok/ .m1/ .m2/ .m3/   the trainer's wheels, SmolLM2's tokenizer and GGUF parts (scripts/gpu/prepare.sh)
#   .vllm1/ .vllm2/ ...          vLLM's site directory, xz-compressed, in parts (scripts/gpu/vllm_prepare.sh)
#
# Then, as soon as their inputs are there:
#   - the trainer's wheels are installed into $GPU_SITE (lib.sh's gpu_collect);
#   - the embedded engine's speed benchmark starts in the background (setsid: it outlives the call), unless
#     VLLM_ENGINE_BENCH=0, with the batches, prompt and output lengths of the vLLM benchmark (and, by default,
#     the engine's other prefill chunking and its torch.compile rows, compiled with one prefill forward of up
#     to 65,536 tokens: VLLM_ENGINE_BENCH_ARGS replaces those);
#   - the GGUF is converted to the bf16 HF directory that vLLM serves, in the background;
#   - the vLLM parts are checked (sha256), joined and unpacked into $VLLM_SITE (a few seconds).
# Run from the repository root; prints what is there and what is still missing.
set -uo pipefail
source scripts/gpu/lib.sh
source scripts/gpu/vllm_env.sh

for f in .vllm*/*; do [ -f "$f" ] && cp "$f" "$VLLM_STORE/"; done
gpu_collect || true  # copies .m*/.tok; installs .whl once it came; lists the store
gpu_env  # the background jobs' PYTHONPATH: the trainer's wheels and the repository's packages

vllm_unpack() {
  [ -f "$VLLM_SITE/.unpacked" ] && return 0
  [ -f "$VLLM_STORE/vsite.parts" ] || return 1
  local n i parts=()
  n=$(cat "$VLLM_STORE/vsite.parts")
  for ((i = 0; i < n; i++)); do
    [ -f "$VLLM_STORE/vsite.tar.xz.part$i" ] || return 1
    parts+=("$VLLM_STORE/vsite.tar.xz.part$i")
  done
  cat "${parts[@]}" | sha256sum -c <(sed 's/ .*/  -/' "$VLLM_STORE/vsite.tar.xz.sha256") \
    || { echo "vLLM: the parts do not add up to the tarball vllm_prepare.sh split"; return 1; }
  rm -rf "$VLLM_SITE" && mkdir -p "$VLLM_SITE"
  cat "${parts[@]}" | xz -d -T0 | tar -x -C "$VLLM_SITE" && touch "$VLLM_SITE/.unpacked"
}

# setsid: a background job outlives the call (the device kills what a call leaves in its own session)
background() {  # name, command...: runs once per machine; $VLLM_WORK/<name>.log, .done when it ended well
  local name=$1; shift
  [ -f "$VLLM_WORK/$name.started" ] && return 0
  touch "$VLLM_WORK/$name.started"
  setsid bash -c '"$@" > "$0.log" 2>&1 && touch "$0.done"; touch "$0.ended"' "$VLLM_WORK/$name" "$@" \
    < /dev/null > /dev/null 2>&1 &
  echo "started in the background: $name (log $VLLM_WORK/$name.log)"
}

if [ -f "$GPU_SITE/.installed" ] && [ -f "$GPU_STORE/tok.tgz" ] && [ "${VLLM_ENGINE_BENCH:-1}" != 0 ]; then
  mkdir -p "$VLLM_TOK" && tar xzf "$GPU_STORE/tok.tgz" -C "$VLLM_TOK"
  background engine_bench python3 bench/engine_gpu_bench.py \
    --tokenizer "$VLLM_TOK" --out "$VLLM_WORK/engine_gpu.jsonl" --work /tmp/agentr1-engine-bench --skip exactness \
    --batches $VLLM_BENCH_BATCHES --prompt "$VLLM_BENCH_PROMPT" --tokens "$VLLM_BENCH_TOKENS" \
    ${VLLM_ENGINE_BENCH_ARGS:---budget-s 600 --prefill-budgets 65536 --compile --compile-prefill-budget 65536}
fi
if [ -f "$GPU_SITE/.installed" ] && ls "$GPU_STORE"/gguf.xz.part{1,2,3} > /dev/null 2>&1; then
  background convert bash -c 'source scripts/gpu/lib.sh && gpu_env && m=$(gpu_smollm2) && test -f "$m/config.json" && echo "$m"'
fi
vllm_unpack && echo "vLLM site: $VLLM_SITE ($(du -sh "$VLLM_SITE" | cut -f1))"

echo "carried so far: $(cd "$VLLM_STORE" && ls | tr '\n' ' ')| $(cd "$GPU_STORE" && ls | tr '\n' ' ')"
missing=()
[ -f "$GPU_SITE/.installed" ] || missing+=(.whl)
[ -f "$GPU_STORE/tok.tgz" ] || missing+=(.tok)
for i in 1 2 3; do [ -f "$GPU_STORE/gguf.xz.part$i" ] || missing+=(".m$i"); done
if [ ! -f "$VLLM_SITE/.unpacked" ]; then
  n=$(cat "$VLLM_STORE/vsite.parts" 2>/dev/null || echo "?")
  [ "$n" = "?" ] && missing+=(.vllm1)
  for ((i = 0; i < ${n/\?/0}; i++)); do [ -f "$VLLM_STORE/vsite.tar.xz.part$i" ] || missing+=(".vllm$((i + 1))"); done
fi
echo "still to carry: ${missing[*]:-nothing}"
for job in engine_bench convert; do
  [ -f "$VLLM_WORK/$job.started" ] || continue
  if [ -f "$VLLM_WORK/$job.ended" ]; then
    echo "$job: $([ -f "$VLLM_WORK/$job.done" ] && echo done || echo FAILED):"; tail -n 3 "$VLLM_WORK/$job.log"
  else echo "$job: running"; fi
done
