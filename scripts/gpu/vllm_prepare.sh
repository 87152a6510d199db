#!/usr/bin/env bash
# Here (with network), before the vLLM runs on the H200 (issue 19; scripts/gpu/vllm_serve.sh): vLLM 0.25.0
# and what it needs beyond the CUDA image, unpacked into one site directory for Python 3.12, pruned of the
# kernels a bf16 Llama on Hopper never loads, packed as one xz tarball and split into parts of <= 50 MiB,
# one ignored folder per device call: .vllm1/ .vllm2/ ... (the sha256 of the whole goes into .vllm1/).
#
# What is left out, and why that is safe for `vllm serve` of SmolLM2 on an H200 (read in vLLM 0.25.0's source):
# - torch, torchaudio, torchvision, transformers, triton, numba, numpy, aiohttp, pillow, tiktoken, ... : in the
#   image (KINDS.md); vLLM pins torch 2.11.0 / torchvision 0.26.0 / torchaudio 2.11.0, the image's versions.
# - flashinfer-python/-cubin, tilelang, nvidia-cutlass-dsl, quack-kernels, humming-kernels, tokenspeed-mla,
#   fastsafetensors, nvidia-cudnn-frontend, nvtx, torchcodec, PyNvVideoCodec: imported only by the backends,
#   kernels and loaders that use them (FlashInfer/MLA attention, MoE, quantization, video), never by a dense
#   bf16 model on the FLASH_ATTN (FA3) backend.
# - lm-format-enforcer, outlines_core, anthropic, mcp, opentelemetry-*, depyf, mistral_common, supervisor:
#   imported lazily (guided decoding by those backends, /v1/messages converters, tracing, compile dumps,
#   Mistral tokenizers, SageMaker's process supervisor).
# - in the vllm wheel: vllm_flash_attn/_vllm_fa2_C (FA2; Hopper runs FA3, which stays), _moe_C (MoE; its
#   import is suppressed), _flashmla*, _qutlass_C (suppressed), third_party/deep_gemm and fmha_sm100 (FP8 and
#   Blackwell kernels), vllm-rs (the opt-in Rust frontend, VLLM_USE_RUST_FRONTEND).
# Pinned away from vLLM's metadata: xgrammar 0.2.9 with apache-tvm-ffi 0.1.11 (vLLM pins tvm-ffi 0.1.9, with
# which only xgrammar <= 0.2.3 installs: 44 MB against 1.3 MB; tvm-ffi is otherwise used only by the CuTe
# flash-attention kernels, which a Hopper FA3 run does not import).
#
# Checked here on CPU (torch 2.13 CPU, the CPU platform forced): with only this site and the image's packages,
# vllm's serve CLI, its FastAPI app (dev mode: /collective_rpc, /sleep, ...), the engine core, the GPU worker,
# the model runner and the Llama model import.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
DL=${VLLM_DL:-/tmp/agentr1-vllm-wheels}    # downloads (not carried)
SITE=${VLLM_BUILD:-/tmp/agentr1-vllm-site}  # the unpacked, pruned site (not carried)
PART_MIB=${PART_MIB:-50}
PLATFORMS=()
for p in manylinux_2_28 manylinux_2_17 manylinux2014 manylinux_2_24 manylinux_2_26 manylinux_2_27 manylinux_2_31 \
         manylinux_2_34 manylinux_2_35 manylinux1 manylinux_2_5; do PLATFORMS+=(--platform "${p}_x86_64"); done
WHEEL_OPTS=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}")

mkdir -p "$DL"
"$PY" -m pip download -q "${WHEEL_OPTS[@]}" -d "$DL" \
  vllm==0.25.0 fastapi==0.136.3 starlette==1.10.0 uvicorn==0.54.0 python-multipart==0.0.34 pydantic==2.14.4 \
  pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 openai==2.54.0 jiter==0.19.0 distro==1.9.0 \
  sniffio==1.3.1 openai-harmony==0.0.8 prometheus-fastapi-instrumentator==8.1.0 cachetools==8.0.2 blake3==1.0.11 \
  cbor2==6.3.0 ijson==3.6.0 pybase64==1.5.1 msgspec==0.23.0 pyzmq==27.3.0 partial-json-parser==0.2.1.1.post7 \
  python-json-logger==4.2.0 setproctitle==1.3.8 diskcache==5.6.3 lark==1.2.2 watchfiles==1.3.0 \
  llguidance==1.7.6 xgrammar==0.2.9 apache-tvm-ffi==0.1.11 compressed-tensors==0.17.0 loguru==0.7.3 \
  model-hosting-container-standards==0.1.16 jmespath==1.1.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
  referencing==0.37.0 rpds-py==2026.9.1

rm -rf "$SITE"
"$PY" -m pip install -q --no-index --no-compile --target "$SITE" "${WHEEL_OPTS[@]}" "$DL"/*.whl
( cd "$SITE/vllm"
  rm -rf vllm_flash_attn/_vllm_fa2_C.abi3.so _moe_C_stable_libtorch.abi3.so _flashmla_C.abi3.so \
         _flashmla_extension_C.abi3.so _qutlass_C.abi3.so vllm-rs third_party/deep_gemm third_party/fmha_sm100 )
find "$SITE" -name __pycache__ -prune -exec rm -rf {} +
du -sh "$SITE"

tarball=/tmp/agentr1-vllm-site.tar.xz
tar -C "$SITE" -cf - . | xz -9 -T2 > "$tarball"
for d in .vllm*/; do [ -d "$d" ] && rm -rf "$d"; done
rm -rf /tmp/agentr1-vllm-parts && mkdir -p /tmp/agentr1-vllm-parts
split -b "${PART_MIB}M" -d -a 1 "$tarball" /tmp/agentr1-vllm-parts/vsite.tar.xz.part
n=0
for part in /tmp/agentr1-vllm-parts/vsite.tar.xz.part*; do
  n=$((n + 1))
  grep -qx "/.vllm$n/" .git/info/exclude 2>/dev/null || echo "/.vllm$n/" >> .git/info/exclude
  mkdir -p ".vllm$n" && mv "$part" ".vllm$n/"
done
(cd /tmp && sha256sum agentr1-vllm-site.tar.xz | sed 's/ .*/  vsite.tar.xz/') > .vllm1/vsite.tar.xz.sha256
echo "$n" > .vllm1/vsite.parts
ls -l .vllm*/
