#!/usr/bin/env bash
# On the H200 (issue 43), first thing in every call of the SGLang sequence (docs/backends.md, "SGLang on the
# H200"): keep what this call carried in /tmp, which outlives the call while the machine stays warm, and unpack
# whatever is complete. Idempotent; takes the folders in any order and any number per call.
#
#   .whl/ .tok/ .m1/ .m2/ .m3/   the trainer's wheels, SmolLM2's tokenizer and GGUF parts (scripts/gpu/prepare.sh)
#   .sgl1/ .sgl2/ ...            SGLang's site directory, xz-compressed, in parts (scripts/gpu/sglang_prepare.sh)
#   .sgfa1/ ...                  optional: sgl-kernel's FlashAttention-3 library (SGLANG_FA3=1 sglang_prepare.sh)
#
# Then: the trainer's wheels are installed into $GPU_SITE (lib.sh's gpu_collect); the site parts are checked
# (sha256), joined and unpacked into $SGLANG_SITE; FA3, once complete, into $SGLANG_SITE/sgl_kernel/.
# Prints what is there and what is still to carry.
set -uo pipefail
source scripts/gpu/lib.sh
source scripts/gpu/sglang_env.sh

for f in .sgl*/* .sgfa*/*; do [ -f "$f" ] && cp "$f" "$SGLANG_STORE/"; done
gpu_collect | tail -n 3 || true  # copies .m*/.tok; installs .whl once it came; the store's last lines
sglang_unpack sgsite "$SGLANG_SITE" && echo "SGLang site: $SGLANG_SITE ($(du -sh "$SGLANG_SITE" | cut -f1))"
if [ -f "$SGLANG_WORK/sgsite.unpacked" ] && sglang_unpack sgfa3 /tmp/agentr1-sgfa3; then
  ln -sf /tmp/agentr1-sgfa3/agentr1-sglang-flash_ops.abi3.so "$SGLANG_SITE/sgl_kernel/flash_ops.abi3.so"
  echo "FlashAttention-3 (sgl-kernel flash_ops): there"
fi

missing=($(sglang_missing sgsite))
[ -f "$GPU_SITE/.installed" ] || missing+=(.whl)
[ -f "$GPU_STORE/tok.tgz" ] || missing+=(.tok)
for i in 1 2 3; do [ -f "$GPU_STORE/gguf.xz.part$i" ] || missing+=(".m$i"); done
fa3=$(sglang_missing sgfa3 | tr '\n' ' ')
echo "carried so far: $(ls "$SGLANG_STORE" | tr '\n' ' ')"
echo "still to carry: ${missing[*]:-nothing}${fa3:+ (optional, for --attention-backend fa3: $fa3)}"
