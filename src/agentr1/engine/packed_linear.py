"""The CPU engine's matrix products on weights packed once for oneDNN.

A decode step of a small model on the CPU is its matrix products (80% of the step), each a few rows
against a large weight. ``F.linear`` hands them to MKL, which re-packs the whole weight into its own
layout on every call: at 16 rows that copy costs as much as the arithmetic, and MKL's kernels for AMD
CPUs leave AVX-512 unused. oneDNN can take a weight reordered once into its blocked layout
(``torch.ops.mkldnn._reorder_linear_weight``, what Inductor's CPU freezing uses) and multiply any
number of rows against it (``_linear_pointwise``); one SmolLM2 decode step's products at 16 rows take
0.51x the time with 2 threads and 0.59x with one (``bench/cpu_linear_bench.py``).

:func:`pack_linears` turns every float32 (or, where the CPU multiplies it in hardware, bfloat16)
``nn.Linear`` of a model on the CPU into a :class:`PackedLinear`: the same module, parameters and
hooks, whose forward reads the packed copy. Its results differ from MKL's in the last bits (another
summation order, ~1e-4 relative at most on SmolLM2's shapes), but not with the number of rows in the
product from 2 rows up nor with the thread count, so the engine's bit-exact prefix reuse holds as before.

The packed copy replaces the weight: the layer's ``weight`` parameter keeps its shape and dtype but holds one
element (a zero, broadcast), so the model takes no more memory than before; ``state_dict()`` gives the weight
unpacked from the copy (the same values; with ``keep_vars=True`` the parameter itself) and ``load_state_dict`` packs
what it is given. A weight the layer shares
with another module (an output projection tied to the input embedding) stays whole and its copy is renewed after a
weight update (:func:`repack_linears`); the others are packed from the new tensors directly (:func:`packed_loaders`,
which ``weights.copy_into`` uses).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["PackedLinear", "pack_linears", "packed_loaders", "repack_linears"]

log = logging.getLogger(__name__)


def _packable(dtype: torch.dtype) -> bool:
    if not torch.backends.mkldnn.is_available():
        return False
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return dtype == torch.float32


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` whose forward multiplies by a oneDNN-packed copy of its weight (:func:`pack_linears`)."""

    packed: torch.Tensor
    released = False  # whether ``weight`` was given up for the packed copy (one broadcast zero)

    def pack(self, weight: torch.Tensor | None = None) -> None:
        """Pack ``weight`` (default: the layer's own) as the weight the layer multiplies by."""
        source = self.weight if weight is None else weight
        if weight is None and self.released:
            raise RuntimeError("this layer's weight lives only in its packed copy: pack a new weight")
        if tuple(source.shape) != tuple(self.weight.shape):
            raise ValueError(f"a weight of shape {tuple(source.shape)} for a layer of {tuple(self.weight.shape)}")
        source = source.detach().to(device="cpu", dtype=self.weight.dtype).contiguous()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(source, None)

    def release(self) -> None:
        """Give up ``weight``'s memory: it keeps its shape and dtype (one zero, broadcast) for ``state_dict``."""
        with torch.no_grad():
            self.weight.data = torch.zeros((), dtype=self.weight.dtype).expand(self.weight.shape)
        self.released = True

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self.released and not keep_vars:  # the weight's values, unpacked (keep_vars: the parameter itself)
            destination[prefix + "weight"] = self.packed.to_dense()

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any, **kwargs: Any) -> None:
        if self.released and prefix + "weight" in state_dict:
            state_dict = dict(state_dict)
            self.pack(state_dict.pop(prefix + "weight"))
            missing_weight_is_loaded = args[2] if len(args) > 2 else kwargs.get("missing_keys")
            super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
            if missing_weight_is_loaded is not None and prefix + "weight" in missing_weight_is_loaded:
                missing_weight_is_loaded.remove(prefix + "weight")
            return
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.detach()
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, bias, "none", [], "")


def pack_linears(model: Any) -> int:
    """Make ``model``'s packable linear layers :class:`PackedLinear` (see the module docstring); returns how many.

    Checked once on the first layer against ``F.linear`` (a private operator of torch: if it is missing or wrong
    in this torch, nothing is packed and the model is left as it was)."""
    layers = [m for m in model.modules() if type(m) is nn.Linear and m.weight.device.type == "cpu"
              and _packable(m.weight.dtype)]
    if not layers:
        return 0
    try:
        with torch.no_grad():
            first = layers[0]
            x = torch.randn(3, first.in_features, dtype=first.weight.dtype, generator=torch.Generator().manual_seed(0))
            packed = torch.ops.mkldnn._reorder_linear_weight(first.weight.detach(), None)
            bias = None if first.bias is None else first.bias.detach()
            got = torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
            want = F.linear(x, first.weight, first.bias)
            tolerance = 1e-2 if first.weight.dtype == torch.bfloat16 else 1e-4
            if not torch.allclose(got, want, rtol=tolerance, atol=tolerance * float(want.abs().max())):
                raise ValueError(f"packed products differ from F.linear by {float((got - want).abs().max()):.3g}")
    except Exception as exc:  # an optional speed-up: the model works as it is
        log.warning("local engine: linear weights not packed for oneDNN (%s)", exc)
        return 0
    shared = {id(p) for m in model.modules() if not isinstance(m, nn.Linear) for p in m.parameters(recurse=False)}
    for layer in layers:
        layer.__class__ = PackedLinear
        layer.pack()
        if id(layer.weight) not in shared:
            layer.release()
    return len(layers)


def packed_loaders(model: Any) -> dict[str, Callable[[torch.Tensor], None]]:
    """For a weight update (``weights.copy_into``): how to load each released weight of ``model`` (by its
    ``state_dict`` name): pack the new tensor in place of copying it."""
    return {f"{name}.weight": layer.pack for name, layer in model.named_modules()
            if isinstance(layer, PackedLinear) and layer.released}


def repack_linears(model: Any) -> int:
    """Renew the packed copies of ``model``'s :class:`PackedLinear` layers that keep their weight (tied ones) from it,
    after a weight update changed it in place; returns how many."""
    layers = [m for m in model.modules() if isinstance(m, PackedLinear) and not m.released]
    with torch.no_grad():
        for layer in layers:
            layer.pack()
    return len(layers)
