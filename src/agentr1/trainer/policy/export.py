"""Writing trained weights as a Hugging Face model directory the gateway can serve."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import torch

__all__ = ["save_hf_directory"]

# Files of the source directory that describe weights we replace (never copied over).
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".h5", ".msgpack")
_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def _tied(source: Path) -> bool:
    try:
        config = json.loads((source / "config.json").read_text())
    except (OSError, ValueError):
        return False
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    return bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))


def save_hf_directory(
    tensors: Iterable[tuple[str, torch.Tensor]], source: str | os.PathLike[str], path: str | os.PathLike[str]
) -> Path:
    """Write ``model.safetensors`` (+ config, generation config and tokenizer from ``source``) to ``path``.

    The directory is assembled next to ``path`` and moved into place, so a reader never sees a
    half-written model; an existing ``path`` is replaced. The output embedding is left out when
    the config ties it to the input embedding (as ``save_pretrained`` does). The tensors are written from
    their own memory: the caller leaves them unchanged meanwhile (the trainer saves between updates)."""
    from safetensors.torch import save_file

    source, path = Path(source), Path(path)
    tied = _tied(source)
    # the tensors themselves, not copies: a float32 SmolLM2 copied took 0.5 GB more at the end of the laptop demo, its
    # peak; ``save_file`` writes from them without a copy (measured with safetensors 0.8)
    state = {name: tensor.detach().to("cpu").contiguous() for name, tensor in tensors
             if not (tied and name == "lm_head.weight")}
    if not state:
        raise ValueError("no tensors to save")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        for item in source.iterdir():
            skip = item.name.endswith(_WEIGHT_SUFFIXES) or item.name in _WEIGHT_INDEXES
            if item.is_file() and not skip and not item.name.startswith("agentr1_"):  # cache markers stay
                shutil.copy2(item, staging / item.name)
        save_file(state, str(staging / "model.safetensors"), metadata={"format": "pt"})
        if path.exists():
            shutil.rmtree(path)
        staging.rename(path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return path
