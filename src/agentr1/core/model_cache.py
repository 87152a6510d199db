"""The model cache: model directories built once, under a lock, by whichever process asks first.

``$AGENTR1_CACHE/models`` (default ``~/.cache/agentr1/models``) holds the converted and the tiny random models of
:mod:`agentr1.core.models`, :mod:`agentr1.core.qwen_models` and :mod:`agentr1.core.vision_models`. A directory counts
as built when its marker file names its kind and the current recipe version; :func:`build_atomically` builds it in a
temporary directory and renames it into place, so concurrent first runs build it once and none reads a half-built one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["MARKER", "RECIPE_VERSION", "build_atomically", "is_complete", "models_cache_dir", "offline_hub",
           "save_random_model"]

# Bump when the conversion recipe changes: cached directories with another version are rebuilt.
RECIPE_VERSION = 1
MARKER = "agentr1_model.json"


def offline_hub() -> None:
    """Nothing downloads from a model hub: transformers is told so before it is used."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def models_cache_dir() -> Path:
    """``$AGENTR1_CACHE/models``, by default ``~/.cache/agentr1/models``."""
    root = os.environ.get("AGENTR1_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "agentr1"
    return base / "models"


def is_complete(path: Path, kind: str) -> bool:
    """Whether ``path`` is a built model directory of ``kind`` and the current recipe."""
    try:
        marker = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("kind") == kind and marker.get("recipe_version") == RECIPE_VERSION


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_atomically(target: Path, kind: str, build: Any) -> Path:
    """Run ``build(tmp_dir)`` and move the result to ``target``, under a lock, once."""
    if is_complete(target, kind):
        return target
    with _locked(target):
        if is_complete(target, kind):  # another process finished it while we waited
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
        try:
            build(tmp)
            (tmp / MARKER).write_text(json.dumps({"kind": kind, "recipe_version": RECIPE_VERSION}))
            _make_readable(tmp)
            if target.exists():  # stale or incomplete: replace it
                stale = target.with_name(f".stale-{target.name}-{os.getpid()}")
                os.rename(target, stale)
                shutil.rmtree(stale, ignore_errors=True)
            os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _make_readable(path: Path) -> None:
    """mkdtemp makes a 0700 directory: give it the usual permissions before it becomes the cache."""
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o777 & ~umask)
    for child in path.iterdir():
        child.chmod(0o666 & ~umask)


def save_random_model(model_class: Any, config: Any, *, seed: int, generation_config: Any, out: Path,
                      companion: Any) -> Path:
    """``model_class(config)`` with seeded random weights (the global RNG left as it was), saved to ``out``
    as safetensors with its generation config and ``companion`` (its tokenizer or processor)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    model.generation_config = generation_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    companion.save_pretrained(out)
    return out
