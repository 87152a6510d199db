"""The CPU engine's decode steps and text prefills for Llama-family models, without transformers' module machinery.

A decode step of 16 rows on the CPU runs ~1,000 small torch operations besides the matrix products; in
transformers' modules each of them also passes through ``nn.Module.__call__``, output-capturing decorators,
keyword plumbing and mask preparation, which on a 2-core laptop is a sizeable share of the step. :class:`FlatForward`
runs the same operations in the same order on the same tensors (the model's own parameters, its rotary
embedding module, the engine's :class:`~.slot_cache.SlotCache` and its attention functions) as one flat
function, so its logits and keys/values are the same bits as the model's forward (``tests/engine/test_flat_forward.py``).

A prefill forward holds each row's new prompt tokens left-padded to the longest (in exact mode: to a chunk of 16
queries per row, one chunk per forward), so the model's forward multiplies every padding query through every layer
(16 short prompts: 156 real tokens in 256 rows) and reads every weight once per chunk. :meth:`FlatForward.prefill`
runs consecutive planned forwards of an admission (``prefill_plan.py``) as one pass: their real tokens only, as one
flat batch of one-query rows, and per planned forward its queries laid out padded as that forward held them, just for
its attention, whose shape (and so its bits) stays the model's. The products' row count is rounded up to a multiple of
16 (rows repeating the first query), as the padded forward's always was: a packed product's rows do not depend on how
many share it from 2 up (``packed_linear.py``), and the multiple of 16 keeps that to what the exact prefill has always
relied on.

It covers the architectures the engine serves by default, ``LlamaForCausalLM`` (SmolLM2) and
``Qwen2ForCausalLM`` (Qwen2.5) without sliding-window layers, with SiLU MLPs; :func:`flat_forward_for` returns
None for anything else, and the engine then runs the model's forward as before; so it does for a forward
while a forward hook is registered on any of the model's modules (:meth:`FlatForward.hooked`), and for a prefill
whose rows carry image embeddings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .packed_linear import fused_linears
from .slot_cache import SlotCache, decode_attention

__all__ = ["AttentionGroup", "FlatForward", "FlatPrefill", "SharedColumns", "flat_forward_for", "unsupported_reason"]

ARCHITECTURES = {"LlamaForCausalLM", "Qwen2ForCausalLM"}


def unsupported_reason(model: Any) -> str | None:
    """Why :class:`FlatForward` cannot run ``model`` (None: it can)."""
    name = type(model).__name__
    if name not in ARCHITECTURES:
        return f"{name} is not one of {sorted(ARCHITECTURES)}"
    config = model.config
    if getattr(config, "hidden_act", None) != "silu":
        return f"hidden_act {config.hidden_act!r} (only silu)"
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or []):
        return "sliding-window layers"
    if getattr(config, "use_sliding_window", False):
        return "sliding-window attention"
    if getattr(config, "pretraining_tp", 1) != 1:
        return "pretraining_tp != 1"
    return None


def _norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' Llama/Qwen2 RMSNorm, operation for operation."""
    dtype = hidden.dtype
    hidden = hidden.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + eps)
    return weight * hidden.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@dataclass(frozen=True)
class _Layer:
    attention: Any  # the attention module (what transformers' SDPA function reads its head groups from)
    input_norm: torch.Tensor
    input_eps: float
    q: Callable[[torch.Tensor], torch.Tensor]
    k: Callable[[torch.Tensor], torch.Tensor]
    v: Callable[[torch.Tensor], torch.Tensor]
    o: Callable[[torch.Tensor], torch.Tensor]
    post_norm: torch.Tensor
    post_eps: float
    gate: Callable[[torch.Tensor], torch.Tensor]
    up: Callable[[torch.Tensor], torch.Tensor]
    down: Callable[[torch.Tensor], torch.Tensor]
    qkv: Callable[[torch.Tensor], torch.Tensor] | None  # q, k and v side by side in one product (packed_linear.py)
    gate_up: Callable[[torch.Tensor], torch.Tensor] | None


# a layer's attention: (layer index, layer, q [B, heads, 1, d], k and v [B, kv_heads, 1, d]) -> its output [B, 1, hidden]
Attend = Callable[[int, _Layer, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class AttentionGroup:
    """The attention of one planned prefill forward (``prefill_plan.py``) inside a flat prefill: its ``rows`` rows of
    ``width`` queries laid out left-padded as that forward held them."""

    flat: torch.Tensor  # [n]: the flat rows of its real queries
    padded: torch.Tensor  # [n]: their places in its padded [rows * width] layout
    rows: int
    width: int
    slots: torch.Tensor  # [rows]: the slot each of its rows reads
    kv_len: int
    mask: torch.Tensor  # [rows, 1, width, kv_len], True: attend
    last: torch.Tensor | None  # the flat rows whose logits it gives, in order (None: it gives none)


@dataclass(frozen=True)
class SharedColumns:
    """Columns ``start..end-1`` that slot ``source`` computes for the slots ``targets`` (rows sharing its segment)."""

    source: int
    targets: torch.Tensor
    start: int
    end: int


@dataclass(frozen=True)
class FlatPrefill:
    """Planned prefill forwards as one flat batch of one-query rows: the real queries of all of them (the first
    ``real``), then repeats of the first up to a multiple of 16 rows (their products' row count; nothing of them is
    kept). Real query ``i``'s keys and values go to column ``cols[i]`` of slot ``slots[i]``."""

    ids: torch.Tensor  # [M]
    positions: torch.Tensor  # [M]
    slots: torch.Tensor  # [M]
    cols: torch.Tensor  # [M]
    real: int
    groups: list[AttentionGroup]
    copies: list[SharedColumns]


class FlatForward:
    """Decode steps (:meth:`decode`) and text prefills (:meth:`prefill`) of ``model`` as flat functions (see the
    module docstring)."""

    def __init__(self, model: Any, *, pair_lone_rows: bool = False) -> None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        self.pair_lone_rows = pair_lone_rows

        inner = model.model
        self.embed = inner.embed_tokens
        self.rotary = inner.rotary_emb
        self.norm, self.norm_eps = inner.norm.weight, inner.norm.variance_epsilon
        self.lm_head = model.lm_head.forward  # the module's forward: no hooks in a flat forward
        first = inner.layers[0].self_attn
        self.head_dim, self.scaling = first.head_dim, first.scaling
        self.kv_heads = int(getattr(model.config, "num_key_value_heads", None) or model.config.num_attention_heads)
        self.layers = [self._layer(layer) for layer in inner.layers]
        self.modules = list(model.modules())
        self.sdpa = sdpa_attention_forward  # what the model's forward calls for a prefill's attention

    def hooked(self) -> bool:
        """Whether a forward hook is registered on the model or any of its modules (or globally): then only the
        model's forward runs them (a fault injected by a test, a probe of activations), and the engine uses it."""
        from torch.nn.modules import module

        if module._global_forward_hooks or module._global_forward_pre_hooks:
            return True
        return any(m._forward_hooks or m._forward_pre_hooks for m in self.modules)

    @staticmethod
    def _layer(layer: Any) -> _Layer:
        attention, mlp = layer.self_attn, layer.mlp
        return _Layer(attention, layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon,
                      attention.q_proj.forward, attention.k_proj.forward, attention.v_proj.forward,
                      attention.o_proj.forward, layer.post_attention_layernorm.weight,
                      layer.post_attention_layernorm.variance_epsilon,
                      mlp.gate_proj.forward, mlp.up_proj.forward, mlp.down_proj.forward,
                      fused_linears(attention, ("q_proj", "k_proj", "v_proj")), fused_linears(mlp, ("gate_proj", "up_proj")))

    def decode(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: SlotCache) -> torch.Tensor:
        """One decode step: ``ids`` and ``positions`` ``[B, 1]``, ``mask`` ``[B, 1, 1, L]``; the logits ``[B, vocab]``
        of the last position, as the model's forward with ``past_key_values=cache, logits_to_keep=1`` gives them."""
        batch = ids.shape[0]

        def attend(index: int, layer: _Layer, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            keys, values = cache.update(k, v, index)
            heads, kv_heads = q.shape[1], keys.shape[1]
            grouped = q.reshape(batch, kv_heads, heads // kv_heads, self.head_dim)
            attended = decode_attention(grouped, keys, values, mask, self.scaling)
            attended = attended.reshape(batch, heads, 1, self.head_dim).transpose(1, 2).contiguous()
            return attended.reshape(batch, 1, -1).contiguous()

        hidden = _norm(self._layers(ids, positions, attend), self.norm, self.norm_eps)
        return self.lm_head(hidden)[:, -1, :]

    def prefill(self, flat: FlatPrefill, cache: SlotCache) -> list[torch.Tensor | None]:
        """One pass of ``flat``'s planned forwards: per forward, the logits of its rows' last queries (rows as the
        model's forward over that forward's padded rows with ``logits_to_keep=1`` gives them; None where it gives
        none). Each layer writes every query's keys and values, copies the shared columns, then runs each forward's
        attention in that forward's own shape."""
        size = flat.ids.numel()
        real = flat.real
        cache.begin(flat.slots[:real, None], flat.cols[:real, None], 0, None)

        def attend(index: int, layer: _Layer, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            cache.write(k[:real], v[:real], index)  # the repeats' later layers are not the first query's
            for shared in flat.copies:
                cache.copy_columns(shared.source, shared.targets, shared.start, shared.end, layer=index)
            heads = q.shape[1]
            attended = q.new_zeros(size, heads * self.head_dim)
            for group in flat.groups:
                keys, values = cache.read(index, group.slots, group.kv_len)
                query = q.new_zeros(group.rows * group.width, heads, self.head_dim)
                query.index_copy_(0, group.padded, q.index_select(0, group.flat)[:, :, 0])
                query = query.view(group.rows, group.width, heads, self.head_dim).transpose(1, 2)
                out, _ = self.sdpa(layer.attention, query, keys, values, group.mask, dropout=0.0, scaling=self.scaling)
                attended.index_copy_(0, group.flat, out.reshape(group.rows * group.width, -1).index_select(0, group.padded))
            return attended.view(size, 1, -1)

        hidden = self._layers(flat.ids[:, None], flat.positions[:, None], attend)
        return [None if group.last is None else
                self._output_layer(_norm(hidden.index_select(0, group.last), self.norm, self.norm_eps))[:, -1, :]
                for group in flat.groups]

    def _output_layer(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output layer over ``hidden`` [rows, 1, hidden]; with :attr:`pair_lone_rows` a lone row beside a copy of
        itself, so that its logits are the bits it gets in company (a CPU product of one row sums in another order
        than of two or more: ``packed_linear.py``; decode steps then run two rows at least, ``batch.py``)."""
        if self.pair_lone_rows and hidden.shape[0] == 1 and hidden.device.type == "cpu":
            return self.lm_head(hidden.expand(2, -1, -1).contiguous())[:1]
        return self.lm_head(hidden)

    def _layers(self, ids: torch.Tensor, positions: torch.Tensor, attend: Attend) -> torch.Tensor:
        """The decoder layers over one query per row (``ids``, ``positions`` ``[B, 1]``): the last hidden states."""
        hidden = self.embed.forward(ids)
        cos, sin = self.rotary(hidden, positions)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        shape = (ids.shape[0], 1, -1, self.head_dim)
        for index, layer in enumerate(self.layers):
            residual = hidden
            hidden = _norm(hidden, layer.input_norm, layer.input_eps)
            if layer.qkv is not None:  # one product; q and k rotated together (the same operations on each element)
                qkv = layer.qkv(hidden).view(shape).transpose(1, 2)
                heads = qkv.shape[1] - 2 * self.kv_heads
                qk = qkv[:, : heads + self.kv_heads]
                qk = (qk * cos) + (_rotate_half(qk) * sin)
                q, k, v = qk[:, :heads], qk[:, heads:], qkv[:, heads + self.kv_heads :]
            else:
                q = layer.q(hidden).view(shape).transpose(1, 2)
                k = layer.k(hidden).view(shape).transpose(1, 2)
                v = layer.v(hidden).view(shape).transpose(1, 2)
                q = (q * cos) + (_rotate_half(q) * sin)
                k = (k * cos) + (_rotate_half(k) * sin)
            hidden = residual + layer.o(attend(index, layer, q, k, v))
            residual = hidden
            hidden = _norm(hidden, layer.post_norm, layer.post_eps)
            if layer.gate_up is not None:
                gate, up = layer.gate_up(hidden).chunk(2, dim=-1)
                hidden = residual + layer.down(F.silu(gate) * up)
            else:
                hidden = residual + layer.down(F.silu(layer.gate(hidden)) * layer.up(hidden))
        return hidden


def flat_forward_for(model: Any, *, pair_lone_rows: bool = False) -> FlatForward | None:
    """A :class:`FlatForward` of ``model``, or None where :func:`unsupported_reason` says it cannot run it;
    ``pair_lone_rows``: a prefill's lone row goes through the output layer beside a copy (``batch_invariant``)."""
    return None if unsupported_reason(model) is not None else FlatForward(model, pair_lone_rows=pair_lone_rows)
