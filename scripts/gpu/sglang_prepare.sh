#!/usr/bin/env bash
# Here (with network), before the SGLang runs on the H200 (issue 43; scripts/gpu/sglang_serve.sh): SGLang 0.5.17
# (the last release that pins torch==2.11.0, the CUDA image's torch) and what it needs beyond the image, unpacked
# into one site directory for Python 3.12, pruned of what an H200 never loads, packed as one xz tarball and split
# into parts of <= PART_MIB (40) MiB, one ignored folder per device call: .sgl1/ .sgl2/ ... (the sha256 of the
# whole and the number of parts go into .sgl1/). With SGLANG_FA3=1 also sgl-kernel's FlashAttention-3 library
# (flash_ops.abi3.so, 1,071 MiB raw, 326 MiB in the wheel), packed the same way into .sgfa1/ .sgfa2/ ...: without
# it the server runs with --attention-backend triton (sglang_serve.sh chooses by what was carried).
#
# Kept beside the image (KINDS.md: python 3.12, torch/torchaudio 2.11.0, torchvision 0.26.0, triton 3.6.0,
# numpy, aiohttp, httpx, huggingface-hub 1.33, safetensors, sentencepiece, tiktoken, psutil, requests, uvloop,
# pyyaml, jinja2, regex, einops, ninja, nvidia-ml-py, cuda-bindings, prometheus-client, ...). The site goes
# first on the server's PYTHONPATH only, so it shadows the image where both have a package:
#   transformers 5.12.1 (sglang's pin; the image has 5.17, the trainer's site 5.10.4) with tokenizers 0.22.2
#   (transformers 5.12.1 wants <= 0.23.0; the image has 0.23.2); fastapi 0.136.3/pydantic 2.14.4 as vLLM's site.
# Carried because sglang or flashinfer imports them at module level on the server's path (static import closure
# of sglang.launch_server, http_server, scheduler, model_runner, models.llama, layers.sampler): sglang-kernel
# 0.4.5, flashinfer-python 0.6.15.post1 (layers/sampler.py imports flashinfer.sampling on CUDA) with its
# apache-tvm-ffi, cuda-tile, nccl4py, nvidia-cudnn-frontend, nvidia-cutlass-dsl(-libs-base); xgrammar 0.2.1
# (sglang's pin), sgl-deep-gemm, compressed-tensors, modelscope (utils/hf_transformers/common.py), IPython
# (sglang/utils.py) and their small pure-Python needs; openai 2.6.1 (sglang's pin), orjson, msgspec, pyzmq,
# pybase64, partial-json-parser, setproctitle, zstandard, soundfile, dill, gguf, torch_memory_saver.
# Left out (imported lazily, by other hardware, other models or features we do not start): flash-attn-4,
# tilelang, quack-kernels, humming-kernels, tokenspeed-mla, helion, torchao, torchcodec, kernels (the FA3 hub
# download: SGLANG_USE_SGL_FA3_KERNEL=1 takes sgl-kernel's own), smg-grpc-servicer, llguidance, outlines,
# mistral-common, openai-harmony, anthropic, datasets, py-spy, timm's pin (vision models).
# Pruned from the unpacked site:
# - sgl_kernel/sm100/ (load_utils._load_architecture_specific_ops loads sm90/common_ops on compute capability 9.0),
#   sgl_kernel/flashmla_ops.abi3.so (MLA models only: sgl_kernel/flash_mla.py), sgl_kernel/infllm_ops.cpython-310-*
#   (a CPython 3.10 extension: it cannot load on 3.12); flash_ops.abi3.so unless SGLANG_FA3=1 (see above).
#   sgl-kernel's cubins are sm_80 + sm_86 + sm_90a in flash_ops (372 kernels each) and sm_80..sm_120a in
#   common_ops; the sm_90a cubins are ~70% of flash_ops' (compressed) fatbin, and no NVIDIA tool prunes a
#   shared library's fatbin (nvprune takes objects and static libraries), so a Hopper-only flash_ops would be a
#   rebuild from source: not done.
# - xgrammar/lib/libxgrammar.a (65 MB: a static library for C++ builds, never loaded by Python).
# - sglang/multimodal_gen (diffusion serving: `sglang generate`), sglang/test, sglang/benchmark.
# What this site misses, if anything, shows in one device call: sglang_serve.sh imports the server's modules
# one by one first and lists every missing module (sglang_env.sh, sglang_probe) before it starts the server.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
DL=${SGLANG_DL:-/tmp/agentr1-sglang-wheels}    # downloads (not carried)
SITE=${SGLANG_BUILD:-/tmp/agentr1-sglang-site}  # the unpacked, pruned site (not carried)
# the parts' sizes in MiB, in order, the last one repeated: three parts small enough to ride with the GGUF's
# three 28.8 MiB parts (28.8 + 18 + the working tree, 12.1 MiB on 2026-12-05, = 58.9 MiB), then parts that fill
# a call of their own (48 + 12.1 = 60.1 MiB); both leave ~4 MiB for the tree to grow (the limit is 64 MiB a call)
PART_MIB=${PART_MIB:-18 18 18 48}
PLATFORMS=()
for p in manylinux_2_34 manylinux_2_28 manylinux_2_17 manylinux2014 manylinux_2_24 manylinux_2_26 manylinux_2_27 \
         manylinux_2_31 manylinux_2_35 manylinux1 manylinux_2_5; do PLATFORMS+=(--platform "${p}_x86_64"); done
WHEEL_OPTS=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}")

fa3=/tmp/agentr1-sglang-flash_ops.abi3.so
if [ "${SGLANG_SPLIT_ONLY:-0}" != 1 ]; then  # SGLANG_SPLIT_ONLY=1: cut the tarballs made before anew (PART_MIB)
mkdir -p "$DL"
"$PY" -m pip download -q "${WHEEL_OPTS[@]}" -d "$DL" \
  sglang==0.5.17 sglang-kernel==0.4.5 flashinfer-python==0.6.15.post1 transformers==5.12.1 tokenizers==0.22.2 \
  xgrammar==0.2.1 apache-tvm-ffi==0.1.11 sgl-deep-gemm==0.1.5.post1 cuda-tile==1.7.0 nccl4py==0.6.0 \
  nvidia-cudnn-frontend==1.32.0 nvidia-cutlass-dsl==4.6.0 nvidia-cutlass-dsl-libs-base==4.6.0 \
  compressed-tensors==0.20.1 loguru==0.7.3 modelscope==1.40.2 modelscope-hub==0.5.1 \
  ipython==9.18.1 ipython-pygments-lexers==1.1.1 jedi==0.20.1 parso==0.8.7 traitlets==5.16.1 \
  prompt-toolkit==3.0.53 wcwidth==0.9.4 pexpect==4.9.0 ptyprocess==0.7.0 stack-data==0.6.3 asttokens==3.0.2 \
  executing==2.3.0 pure-eval==0.2.4 matplotlib-inline==0.2.2 decorator==5.3.1 \
  fastapi==0.136.3 starlette==1.10.0 uvicorn==0.54.0 python-multipart==0.0.34 pydantic==2.14.4 \
  pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 openai==2.6.1 jiter==0.19.0 distro==1.9.0 \
  sniffio==1.3.1 orjson==3.13.0 msgspec==0.23.0 pyzmq==27.3.0 pybase64==1.5.1 partial-json-parser==0.2.1.1.post7 \
  setproctitle==1.3.8 zstandard==0.25.0 soundfile==0.14.0 cffi==2.1.1 pycparser==3.12 dill==0.4.1 gguf==0.19.0 \
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 \
  torch-memory-saver==0.0.10

rm -rf "$SITE"
"$PY" -m pip install -q --no-index --no-compile --target "$SITE" "${WHEEL_OPTS[@]}" \
  $(ls "$DL"/*.whl | grep -vE '/(helion|humming_kernels|kernels|quack_kernels|smg_grpc_servicer|tilelang|tokenspeed_mla|torchao|torchcodec|cuda_python)-')
mv "$SITE/sgl_kernel/flash_ops.abi3.so" "$fa3"
rm -rf "$SITE/sgl_kernel/sm100" "$SITE/sgl_kernel/flashmla_ops.abi3.so" "$SITE"/sgl_kernel/infllm_ops.cpython-310-* \
       "$SITE/xgrammar/lib/libxgrammar.a" "$SITE/sglang/multimodal_gen" "$SITE/sglang/test" "$SITE/sglang/benchmark"
find "$SITE" -name __pycache__ -prune -exec rm -rf {} +
du -sh "$SITE"
fi

# pack(name, folder prefix, tar args...): one xz tarball split into folders <prefix>1/ <prefix>2/ ...
pack() {
  local name=$1 prefix=$2; shift 2
  local tarball=/tmp/agentr1-$name.tar.xz parts=/tmp/agentr1-$name-parts n=0 d part
  [ "${SGLANG_SPLIT_ONLY:-0}" = 1 ] && [ -f "$tarball" ] || tar "$@" | xz -9 -T2 > "$tarball"
  for d in "$prefix"*/; do [ -d "$d" ] && rm -rf "$d"; done
  rm -rf "$parts" && mkdir -p "$parts"
  python3 - "$tarball" "$parts/$name.tar.xz.part" $PART_MIB <<'PY'  # split(1) cuts one size only
import sys
source, prefix, sizes = sys.argv[1], sys.argv[2], [int(float(m) * 2**20) for m in sys.argv[3:]]
with open(source, "rb") as whole:
    for k in range(1000):
        chunk = whole.read(sizes[min(k, len(sizes) - 1)])
        if not chunk:
            break
        open(f"{prefix}{k:02d}", "wb").write(chunk)
PY
  for part in "$parts"/*; do
    n=$((n + 1))
    grep -qx "/$prefix$n/" .git/info/exclude 2> /dev/null || echo "/$prefix$n/" >> .git/info/exclude
    mkdir -p "$prefix$n" && mv "$part" "$prefix$n/"
  done
  (cd /tmp && sha256sum "agentr1-$name.tar.xz" | sed "s/ .*/  $name.tar.xz/") > "${prefix}1/$name.tar.xz.sha256"
  echo "$n" > "${prefix}1/$name.parts"
  echo "$name: $(du -m "$tarball" | cut -f1) MiB in $n parts: $(ls -d "$prefix"*/ | tr '\n' ' ')"
}
pack sgsite .sgl -C "$SITE" -cf - .
if [ "${SGLANG_FA3:-0}" = 1 ]; then
  pack sgfa3 .sgfa -C "$(dirname "$fa3")" -cf - "$(basename "$fa3")"
fi
ls -l .sgl*/ .sgfa*/ 2> /dev/null
echo "working tree: $(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1) bytes tracked"
