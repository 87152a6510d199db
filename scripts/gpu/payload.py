"""What a GPU lease needs beyond the working tree, in as few device calls as possible: the ignored folders a run
needs (wheels, packed sites, model parts) as one uncompressed tar stream (their contents are compressed already),
cut into chunks of one size, one ignored folder per call (.c01/ .c02/ ...), each filling a call up to the 64 MiB
limit beside the working tree. The folders' own layouts stay as they are, so the scripts that read them
(lib.sh's gpu_collect, sglang_carry.sh, gpu_qwen05) work unchanged on the unpacked copy.

Here:          python3 scripts/gpu/payload.py pack --chunk-mib 44 .whl .sgl1 .sgl2 .sgl3 .sgl4 .q01 ... .q12
On the GPU:    python3 scripts/gpu/payload.py collect     (every call: keep this call's chunks in /tmp; once all are
               there, check the sha256 and unpack into /tmp/agentr1-payload; prints what is still to carry)

The manifest (number of chunks, sha256 of the stream, the folders in it) travels in every chunk folder, so the
chunks may come in any order. ``pack`` adds the chunk folders to .git/info/exclude and prints each call's size
(chunk + the working tree that travels with it).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

CHUNKS = Path("/tmp/agentr1-chunks")
UNPACKED = Path("/tmp/agentr1-payload")
PREFIX = ".c"


def working_tree_bytes() -> int:
    """Tracked files plus untracked files git does not ignore: what every device call sends."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.split(b"\0")
    return sum(Path(p.decode()).stat().st_size for p in listed if p and Path(p.decode()).is_file())


def pack(folders: list[str], chunk_mib: float) -> None:
    for old in Path(".").glob(f"{PREFIX}[0-9][0-9]"):
        shutil.rmtree(old)
    stream = io.BytesIO()
    with tarfile.open(fileobj=stream, mode="w") as tar:
        for folder in folders:
            if not Path(folder).is_dir():
                sys.exit(f"{folder}/ is missing: run the script that makes it first")
            tar.add(folder)
    data = stream.getvalue()
    size = int(chunk_mib * 2**20)
    parts = [data[i:i + size] for i in range(0, len(data), size)]
    manifest = {"parts": len(parts), "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                "folders": folders}
    exclude = Path(".git/info/exclude")
    excluded = set(exclude.read_text().split()) if exclude.is_file() else set()
    tree = working_tree_bytes()
    for k, part in enumerate(parts, 1):
        folder = Path(f"{PREFIX}{k:02d}")
        folder.mkdir()
        (folder / f"payload.part{k:02d}").write_bytes(part)
        (folder / "payload.json").write_text(json.dumps(manifest))
        if f"/{folder}/" not in excluded:
            with exclude.open("a") as f:
                f.write(f"/{folder}/\n")
        print(f"{folder}/: {len(part) / 2**20:.1f} MiB + working tree {tree / 2**20:.1f} MiB = "
              f"{(len(part) + tree) / 2**20:.1f} MiB")
    print(f"{len(parts)} chunks of {' '.join(folders)} ({len(data) / 2**20:.1f} MiB); limit 64 MiB a call")


def collect() -> None:
    CHUNKS.mkdir(parents=True, exist_ok=True)
    for folder in sorted(Path(".").glob(f"{PREFIX}[0-9][0-9]")):
        for f in folder.iterdir():
            shutil.copy(f, CHUNKS / f.name)
    if (UNPACKED / ".done").is_file():
        print(f"payload: unpacked in {UNPACKED}")
        return
    if not (CHUNKS / "payload.json").is_file():
        print("payload: nothing carried yet (carry .c01 first, or any chunk)")
        return
    manifest = json.loads((CHUNKS / "payload.json").read_text())
    missing = [k for k in range(1, manifest["parts"] + 1) if not (CHUNKS / f"payload.part{k:02d}").is_file()]
    if missing:
        print(f"payload: still to carry {' '.join(f'{PREFIX}{k:02d}' for k in missing)} "
              f"({manifest['parts'] - len(missing)} of {manifest['parts']} here)")
        return
    digest = hashlib.sha256()
    for k in range(1, manifest["parts"] + 1):
        digest.update((CHUNKS / f"payload.part{k:02d}").read_bytes())
    if digest.hexdigest() != manifest["sha256"]:
        sys.exit("payload: the chunks do not add up to the packed stream (sha256): carry them again")
    UNPACKED.mkdir(parents=True, exist_ok=True)
    with subprocess.Popen(["tar", "-x", "-C", str(UNPACKED)], stdin=subprocess.PIPE) as tar:
        assert tar.stdin is not None
        for k in range(1, manifest["parts"] + 1):
            tar.stdin.write((CHUNKS / f"payload.part{k:02d}").read_bytes())
            (CHUNKS / f"payload.part{k:02d}").unlink()
        tar.stdin.close()
    if tar.returncode != 0:
        sys.exit("payload: tar failed")
    (UNPACKED / ".done").touch()
    print(f"payload: unpacked {' '.join(manifest['folders'])} in {UNPACKED}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--chunk-mib", type=float, default=44.0)
    p.add_argument("folders", nargs="+")
    sub.add_parser("collect")
    args = parser.parse_args()
    if args.command == "pack":
        pack(args.folders, args.chunk_mib)
    else:
        collect()


if __name__ == "__main__":
    main()
