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
product from 2 rows up nor with the thread count, so the engine's bit-exact prefix reuse holds as before. One row
is another matter: with a longer inner dimension (SmolLM2's down projection, 1,536) oneDNN sums a lone row in
another order than two or more (float32 and bfloat16, AMD EPYC): where a row's bits must not depend on
its batch (``EngineOptions.batch_invariant``), the engine never multiplies one row alone (``batch.py``'s decode steps,
``flat_forward.py``'s output layer).

The packed copy replaces the weight: the layer's ``weight`` parameter keeps its shape and dtype but holds one
element (a zero, broadcast), so the model takes no more memory than before; ``state_dict()`` gives the weight
unpacked from the copy (the same values; with ``keep_vars=True`` the parameter itself) and ``load_state_dict`` packs
what it is given. A weight the layer shares
with another module (an output projection tied to the input embedding) stays whole and its copy is renewed after a
weight update (:func:`repack_linears`); the others are packed from the new tensors directly (:func:`packed_loaders`,
which ``weights.copy_into`` uses).

Sibling layers that multiply the same input, an attention's ``q_proj``/``k_proj``/``v_proj`` and an MLP's
``gate_proj``/``up_proj``, are packed as one stacked weight (:class:`FusedLinears`): a decode step then makes two
products a layer where it made five (SmolLM2 at 16 rows: 0.90x the products' time in float32, 0.84x in bfloat16,
``bench/cpu_linear_bench.py --fused``, 2-core Intel VM). oneDNN computes each output column over the same inputs in the same order
whatever the other columns are, so each layer's columns are the bits its own product gave; :func:`pack_linears` checks
that on the first group and fuses nothing where it does not hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["FusedLinears", "PackedLinear", "fused_linears", "pack_linears", "packed_loaders", "repack_linears"]

SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # layers of one module that share their input

log = logging.getLogger(__name__)


def _packable(dtype: torch.dtype) -> bool:
    if not torch.backends.mkldnn.is_available():
        return False
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return dtype == torch.float32


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` whose forward multiplies by a oneDNN-packed copy of its weight (:func:`pack_linears`)."""

    packed: torch.Tensor | None
    released = False  # whether ``weight`` was given up for the packed copy (one broadcast zero)
    fused: FusedLinears | None = None  # the group whose stacked weight holds this layer's (then ``packed`` is None)

    def pack(self, weight: torch.Tensor | None = None) -> None:
        """Pack ``weight`` (default: the layer's own) as the weight the layer multiplies by."""
        source = self.weight if weight is None else weight
        if weight is None and self.released:
            raise RuntimeError("this layer's weight lives only in its packed copy: pack a new weight")
        if tuple(source.shape) != tuple(self.weight.shape):
            raise ValueError(f"a weight of shape {tuple(source.shape)} for a layer of {tuple(self.weight.shape)}")
        source = source.detach().to(device="cpu", dtype=self.weight.dtype).contiguous()
        if self.fused is not None:
            self.fused.stage(self, source)
        else:
            self.packed = torch.ops.mkldnn._reorder_linear_weight(source, None)

    def dense_weight(self) -> torch.Tensor:
        """The weight this layer multiplies by, unpacked."""
        if self.fused is not None:
            return self.fused.dense_weight(self)
        assert self.packed is not None
        return self.packed.to_dense()

    def release(self) -> None:
        """Give up ``weight``'s memory: it keeps its shape and dtype (one zero, broadcast) for ``state_dict``."""
        with torch.no_grad():
            self.weight.data = torch.zeros((), dtype=self.weight.dtype).expand(self.weight.shape)
        self.released = True

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self.released and not keep_vars:  # the weight's values, unpacked (keep_vars: the parameter itself)
            destination[prefix + "weight"] = self.dense_weight()

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
        if self.fused is not None:
            return self.fused.columns(self, x)
        bias = None if self.bias is None else self.bias.detach()
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, bias, "none", [], "")


class FusedLinears:
    """Released :class:`PackedLinear` siblings that multiply the same input, packed as one weight (their weights
    stacked by rows, in order). Calling it gives every layer's output side by side, in one product; each layer's own
    forward gives its columns of that product (:meth:`columns`), computed once per input tensor."""

    def __init__(self, layers: list[PackedLinear]) -> None:
        self.layers = layers
        bounds = [0]
        for layer in layers:
            bounds.append(bounds[-1] + layer.out_features)
        self.spans = {id(layer): (bounds[i], bounds[i + 1]) for i, layer in enumerate(layers)}
        self.packed: torch.Tensor | None = None
        self._staged: dict[int, torch.Tensor] = {}
        self._bias: torch.Tensor | None = None
        self._bias_versions: tuple[int, ...] = ()
        self._input: torch.Tensor | None = None
        self._output: torch.Tensor | None = None

    def pack(self, weights: list[torch.Tensor]) -> None:
        """Pack the layers' ``weights`` (in order) as the stacked weight."""
        self.packed = torch.ops.mkldnn._reorder_linear_weight(torch.cat(weights).contiguous(), None)
        self._staged.clear()

    def stage(self, layer: PackedLinear, weight: torch.Tensor) -> None:
        """A new weight for ``layer``: packed with its siblings' once all have one (a weight update gives every
        layer's), else at the next product or :meth:`flush`."""
        self._staged[id(layer)] = weight
        if len(self._staged) == len(self.layers):
            self.pack([self._staged[id(m)] for m in self.layers])

    def flush(self) -> None:
        """Pack the staged weights, the siblings without one keeping theirs."""
        if self._staged:
            assert self.packed is not None
            dense = self.packed.to_dense()
            self.pack([self._staged.get(id(m), dense[slice(*self.spans[id(m)])]) for m in self.layers])

    def dense_weight(self, layer: PackedLinear) -> torch.Tensor:
        """``layer``'s rows of the stacked weight, unpacked."""
        self.flush()
        assert self.packed is not None
        return self.packed.to_dense()[slice(*self.spans[id(layer)])].clone()

    def bias(self) -> torch.Tensor | None:
        """The layers' biases side by side (renewed when one of them changed in place: a weight update copies them)."""
        biases = [m.bias for m in self.layers]
        if biases[0] is None:
            return None
        versions = tuple(b._version for b in biases)
        if versions != self._bias_versions:
            self._bias, self._bias_versions = torch.cat([b.detach() for b in biases]), versions
        return self._bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Every layer's output of ``x``, side by side (``[..., sum of out_features]``)."""
        if self._staged:
            self.flush()
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias(), "none", [], "")

    def columns(self, layer: PackedLinear, x: torch.Tensor) -> torch.Tensor:
        """``layer``'s output of ``x``: its columns of the product, made by the first sibling called with this very
        tensor (a model's forward passes the same tensor to each, one after the other) and let go after the last."""
        if x is not self._input:
            self._input, self._output = x, self(x)
        assert self._output is not None
        start, end = self.spans[id(layer)]
        out = self._output[..., start:end].contiguous()
        if layer is self.layers[-1]:
            self._input = self._output = None
        return out


def fused_linears(module: nn.Module, names: tuple[str, ...]) -> FusedLinears | None:
    """The :class:`FusedLinears` of ``module``'s layers ``names`` (None: they are not fused)."""
    first = getattr(module, names[0], None)
    group = getattr(first, "fused", None)
    if group is None or [id(m) for m in group.layers] != [id(getattr(module, n, None)) for n in names]:
        return None
    return group


def _fuse_siblings(model: nn.Module) -> int:
    """Pack every module's released siblings (:data:`SIBLINGS`) as one :class:`FusedLinears`; returns how many groups.
    Checked on the first group: each layer's columns of the fused product must be the bits of its own product."""
    groups = 0
    for module in model.modules():
        for names in SIBLINGS:
            layers = [getattr(module, n, None) for n in names]
            if not all(isinstance(m, PackedLinear) and m.released and m.fused is None for m in layers):
                continue
            if len({(m.in_features, m.weight.dtype, m.bias is None) for m in layers}) != 1:
                continue
            group = FusedLinears(layers)
            group.pack([m.dense_weight() for m in layers])
            if groups == 0 and not _same_bits(group, layers):
                log.warning("local engine: fused products differ from the separate ones; siblings not fused")
                return 0
            for layer in layers:
                layer.fused, layer.packed = group, None
            groups += 1
    return groups


def _same_bits(group: FusedLinears, layers: list[PackedLinear]) -> bool:
    """Whether ``group``'s product gives each of ``layers`` the bits of its own (still packed) product, for 1 to 17 rows."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for rows in (1, 3, 16, 17):
            x = torch.randn(rows, layers[0].in_features, generator=generator).to(layers[0].weight.dtype)
            together = group(x)
            for layer in layers:
                start, end = group.spans[id(layer)]
                if not torch.equal(together[:, start:end], layer(x)):
                    return False
    return True


def pack_linears(model: Any, *, fuse: bool = True) -> int:
    """Make ``model``'s packable linear layers :class:`PackedLinear` (see the module docstring), with ``fuse`` their
    siblings :class:`FusedLinears`; returns how many layers were packed.

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
    if fuse:
        log.debug("local engine: %d groups of sibling layers fused", _fuse_siblings(model))
    return len(layers)


def packed_loaders(model: Any) -> dict[str, Callable[[torch.Tensor], None]]:
    """For a weight update (``weights.copy_into``): how to load each released weight of ``model`` (by its
    ``state_dict`` name): pack the new tensor in place of copying it."""
    return {f"{name}.weight": layer.pack for name, layer in model.named_modules()
            if isinstance(layer, PackedLinear) and layer.released}


def repack_linears(model: Any) -> int:
    """After a weight update: renew the packed copies of ``model``'s :class:`PackedLinear` layers that keep their weight
    (tied ones) from it, and pack what fused groups were given; returns how many layers were re-packed from their own
    weight."""
    layers = [m for m in model.modules() if isinstance(m, PackedLinear) and not m.released]
    with torch.no_grad():
        for layer in layers:
            layer.pack()
        for group in {id(m.fused): m.fused for m in model.modules() if isinstance(m, PackedLinear) and m.fused}.values():
            group.flush()
    return len(layers)
