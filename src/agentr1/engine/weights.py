"""Loading new policy weights into a live model (safetensors file or HF directory)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Tensors from a ``.safetensors`` file or a HF directory (single or sharded checkpoint)."""
    from safetensors.torch import load_file

    path = Path(path)
    if path.is_file():
        return load_file(str(path))
    if not path.is_dir():
        raise FileNotFoundError(f"no weights at {path}")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (path / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors files in {path}")
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        tensors.update(load_file(str(path / name)))
    return tensors


def copy_into(model: Any, tensors: Mapping[str, torch.Tensor]) -> int:
    """Copy ``tensors`` into ``model``'s parameters in place; returns how many were copied.

    Every name must be one of the model's; every parameter must be given, except the output
    embedding when it is tied to the input embedding. Checked before anything is copied. A layer that keeps its weight
    only packed (``packed_linear.py``) packs the new tensor instead; a tied one is re-packed after."""
    from .packed_linear import packed_loaders, repack_linears

    own = model.state_dict(keep_vars=True)
    loaders = packed_loaders(model)
    unexpected = sorted(set(tensors) - set(own))
    tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    missing = sorted(k for k in set(own) - set(tensors) if not (tied and k == "lm_head.weight"))
    if unexpected or missing:
        raise ValueError(
            f"weights do not match the model: {len(unexpected)} unexpected (e.g. {unexpected[:3]}), "
            f"{len(missing)} missing (e.g. {missing[:3]})"
        )
    for name, value in tensors.items():
        if tuple(value.shape) != tuple(own[name].shape):
            raise ValueError(
                f"weights do not match the model: {name} has shape {tuple(value.shape)}, "
                f"expected {tuple(own[name].shape)}"
            )
    with torch.no_grad():
        for name, value in tensors.items():
            if name in loaders:
                loaders[name](value)
            else:
                own[name].copy_(value)
        repack_linears(model)
    return len(tensors)
