# Shared by the vLLM scripts of issue 19 (vllm_carry.sh, vllm_serve.sh, vllm_run.sh, vllm_train.sh); sourced
# after lib.sh, from the repository root on the H200. Everything lives in /tmp, which outlives a call while
# the machine stays warm.
VLLM_STORE=/tmp/agentr1-vllm-carry        # the carried parts of the site tarball
VLLM_SITE=/tmp/vsite                       # vLLM's own site directory: the server's PYTHONPATH, nobody else's
VLLM_WORK=/tmp/agentr1-vllm                # logs, markers, results of the background jobs
VLLM_TOK=/tmp/agentr1-tok                  # SmolLM2's tokenizer and config (the engine benchmark's model shape)
VLLM_PORT=${VLLM_PORT:-8000}
VLLM_URL=http://127.0.0.1:$VLLM_PORT
VLLM_MODEL=${VLLM_MODEL:-$AGENTR1_CACHE/models/smollm2-135m-instruct}   # what vLLM serves (default: gpu_smollm2's)
VLLM_BENCH_BATCHES=${VLLM_BENCH_BATCHES:-1 32 128 256}
VLLM_BENCH_PROMPT=${VLLM_BENCH_PROMPT:-300}
VLLM_BENCH_TOKENS=${VLLM_BENCH_TOKENS:-64}
mkdir -p "$VLLM_STORE" "$VLLM_WORK"
