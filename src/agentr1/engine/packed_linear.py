"""The CPU engine's matrix products on weights packed once for oneDNN.

A decode step of a small model on the CPU is its matrix products (80% of the step), each a few rows
against a large weight. ``F.linear`` hands them to MKL, which re-packs the whole weight into its own
layout on every call: at 16 rows that copy costs as much as the arithmetic, and MKL's kernels for AMD
CPUs leave AVX-512 unused. oneDNN can take a weight reordered once into its blocked layout
(``torch.ops.mkldnn._reorder_linear_weight``, what Inductor's CPU freezing uses) and multiply any
number of rows against it (``_linear_pointwise``); one SmolLM2 decode step's products at 16 rows take
0.51x the time with 2 threads and 0.57x with one (``bench/cpu_linear_bench.py``).

:func:`pack_linears` turns every float32 (or, where the CPU multiplies it in hardware, bfloat16)
``nn.Linear`` of a model on the CPU into a :class:`PackedLinear`: the same module, parameters and
hooks, whose forward reads the packed copy. Its results differ from MKL's in the last bits (another
summation order, ~1e-4 relative at most on SmolLM2's shapes), but not with the number of rows in the
product from 2 rows up nor with the thread count, so the engine's bit-exact prefix reuse holds as before.
:func:`repack_linears` renews the copies after the weights change in place (a policy update). The
packed copies double the memory of the linear weights.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["PackedLinear", "pack_linears", "repack_linears"]

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

    def repack(self) -> None:
        self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != self.weight.dtype or x.device.type != "cpu":
            return F.linear(x, self.weight, self.bias)
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
    for layer in layers:
        layer.__class__ = PackedLinear
        layer.repack()
    return len(layers)


def repack_linears(model: Any) -> int:
    """Renew the packed copies of ``model``'s :class:`PackedLinear` layers from their weights; returns how many."""
    layers = [m for m in model.modules() if isinstance(m, PackedLinear)]
    with torch.no_grad():
        for layer in layers:
            layer.repack()
    return len(layers)
