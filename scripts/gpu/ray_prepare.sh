#!/usr/bin/env bash
# Here (with network), before scripts/gpu/ray_run.sh on the GPU machine (no network, 64 MiB per call):
# ray for Python 3.12 and its dependencies, in pieces that fit the transfers.
#   .raydeps/  ray's own dependencies (click, msgpack, jsonschema + referencing/rpds/attrs, protobuf):
#              small, carried with the first call (next to .whl and .tok).
#   .ray1/ .ray2/  the ray 2.60.0 wheel (~79 MB) in two parts (split -b 40M) + its sha256 in .ray1/:
#              one part per call while the machine is warm; ray_run.sh joins and installs them once
#              both have arrived. Not needed when .ray/ holds a trimmed ray (ray-trim.tar.xz, < 64 MiB).
# scripts/gpu/prepare.sh makes the other pieces (.whl, .m1, .m2, .tok). All are ignored by git.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
for d in .raydeps .ray1 .ray2; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude; done
mkdir -p .raydeps .ray1 .ray2
download() {
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "$@"
}
download -d .raydeps click==8.2.1 msgpack==1.1.1 jsonschema==4.25.1 jsonschema-specifications==2025.9.1 \
  referencing==0.36.2 rpds-py==0.27.1 attrs==25.3.0 protobuf==6.32.1
if [ "${FULL_RAY_WHEEL:-0}" = 1 ]; then
  tmp=$(mktemp -d)
  download -d "$tmp" ray==2.60.0
  wheel=$(ls "$tmp"/ray-2.60.0-*.whl)
  (cd "$tmp" && sha256sum "$(basename "$wheel")") > .ray1/ray.whl.sha256
  split -b 40M -d "$wheel" "$tmp/ray.whl.part-"
  mv "$tmp/ray.whl.part-00" .ray1/ && mv "$tmp/ray.whl.part-01" .ray2/
  [ ! -e "$tmp/ray.whl.part-02" ] || { echo "the wheel needs more than two 40M parts"; exit 5; }
  rm -rf "$tmp"
fi
du -sh .raydeps .ray1 .ray2 .ray 2>/dev/null || true
