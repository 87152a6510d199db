#!/usr/bin/env bash
# Here (with network), before a GPU run on a machine without network: fetch Python 3.12 wheels of what
# the GPU image lacks into .whl/, the SmolLM2 GGUF (xz-compressed, in three parts that each fit one 64 MiB
# transfer next to the repo and another carried folder) into .m1/ .m2/ .m3/, and the converted tokenizer and
# the GGUF's sha256 into .tok/. All are ignored by git (.git/info/exclude). See scripts/gpu/lib.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
for d in .whl .m1 .m2 .m3 .tok; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude; done
mkdir -p .whl .m1 .m2 .m3 .tok

# What the CUDA image (python 3.12, torch 2.11, transformers 5.17) lacks for the gateway, the trainer and
# verl 0.9.1 (which needs transformers < 5.11, and that one tokenizers <= 0.23.0). ray: a stub (stubs/).
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  sqlalchemy==2.1.9 alembic==1.20.1 mako==1.4.3 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
  typing-inspection==0.4.5 typing-extensions==4.16.0 pydantic-settings==2.16.3 python-dotenv==1.2.4 \
  fastapi==0.165.0 starlette==1.10.0 opentelemetry-api==1.45.2 uvicorn==0.54.0 openai==3.57.0 httpx2==2.16.2 \
  httpcore2==2.16.2 truststore==0.10.5 jiter==0.19.0 sniffio==1.3.1 verl==0.9.1 tensordict==0.10.0 pyvers==0.1.0 \
  importlib-metadata==8.9.0 zipp==4.1.2 orjson==3.13.0 codetiming==1.4.0 omegaconf==2.3.1 datasets==5.2.0 \
  dill==0.4.1 multiprocess==0.70.19 transformers==5.10.4 tokenizers==0.22.2 gguf==0.19.0 \
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 attrs==26.1.0 \
  xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2
"$PY" -m pip wheel -q --no-deps antlr4-python3-runtime==4.9.3 -w .whl  # sdist only on PyPI (pure Python)

gguf=$("$PY" -c 'from agentr1.core.models import smollm2_gguf_path; print(smollm2_gguf_path())')
xz -T2 -6 -c "$gguf" > /tmp/smollm2.gguf.xz
# three equal parts (the xz is 86.3 MiB: 28.8 MiB each), so that each part plus the working tree fits one 64 MiB
# call: the tree grew from 12.6 MiB (2026-12-01) to 20.6 MiB (2026-12-03, result files), and the old 48 MiB part
# no longer fit. Carry .whl .tok first, then .m1, .m2, .m3 (lib.sh takes the parts in any order); check `du -cb`
# of a call's folders plus `git ls-files -z | du -cb --files0-from=-` first.
python3 - <<'PY'  # (head/tail in a pipe die of SIGPIPE under pipefail)
data = open("/tmp/smollm2.gguf.xz", "rb").read()
third = -(-len(data) // 3)
for k in range(3):
    open(f".m{k + 1}/gguf.xz.part{k + 1}", "wb").write(data[k * third:(k + 1) * third])
PY
sha256sum /tmp/smollm2.gguf.xz | sed 's/ .*/  gguf.xz/' > .tok/gguf.xz.sha256
model=$("$PY" -c 'from agentr1.core.models import ensure_smollm2; print(ensure_smollm2())')
tar czf .tok/tok.tgz -C "$model" tokenizer.json tokenizer_config.json chat_template.jinja config.json generation_config.json
du -sh .whl .m1 .m2 .m3 .tok
