"""The CPU engine's decode step for Llama-family models, without transformers' module machinery.

A decode step of 16 rows on the CPU runs ~1,000 small torch operations besides the matrix products; in
transformers' modules each of them also passes through ``nn.Module.__call__``, output-capturing decorators,
keyword plumbing and mask preparation, which on a 2-core laptop is a sizeable share of the step. :class:`FastDecode`
runs the same operations in the same order on the same tensors (the model's own parameters, its rotary
embedding module, the engine's :class:`~.slot_cache.SlotCache` and :func:`~.slot_cache.decode_attention`) as one flat
function, so its logits are the same bits as the model's forward (``tests/engine/test_fast_decode.py``).

It covers the architectures the engine serves by default, ``LlamaForCausalLM`` (SmolLM2) and
``Qwen2ForCausalLM`` (Qwen2.5) without sliding-window layers, with SiLU MLPs; :func:`fast_decode_for` returns
None for anything else, and the engine then decodes through the model's forward as before; so it does for a step
while a forward hook is registered on any of the model's modules (:meth:`FastDecode.hooked`). Prefill forwards
always go through the model's forward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .packed_linear import fused_linears
from .slot_cache import SlotCache, decode_attention

__all__ = ["FastDecode", "fast_decode_for", "unsupported_reason"]

ARCHITECTURES = {"LlamaForCausalLM", "Qwen2ForCausalLM"}


def unsupported_reason(model: Any) -> str | None:
    """Why :class:`FastDecode` cannot run ``model`` (None: it can)."""
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


class FastDecode:
    """One decode step of ``model`` (see the module docstring): ``step(ids [B, 1], positions [B, 1], mask
    [B, 1, 1, L], cache)`` returns the logits ``[B, vocab]`` of the last position, as the model's forward with
    ``past_key_values=cache, logits_to_keep=1`` would."""

    def __init__(self, model: Any) -> None:
        inner = model.model
        self.embed = inner.embed_tokens
        self.rotary = inner.rotary_emb
        self.norm, self.norm_eps = inner.norm.weight, inner.norm.variance_epsilon
        self.lm_head = model.lm_head.forward  # the module's forward: no hooks in a decode step
        first = inner.layers[0].self_attn
        self.head_dim, self.scaling = first.head_dim, first.scaling
        self.kv_heads = int(getattr(model.config, "num_key_value_heads", None) or model.config.num_attention_heads)
        self.layers = [self._layer(layer) for layer in inner.layers]
        self.modules = list(model.modules())

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
        return _Layer(layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon,
                      attention.q_proj.forward, attention.k_proj.forward, attention.v_proj.forward,
                      attention.o_proj.forward, layer.post_attention_layernorm.weight,
                      layer.post_attention_layernorm.variance_epsilon,
                      mlp.gate_proj.forward, mlp.up_proj.forward, mlp.down_proj.forward,
                      fused_linears(attention, ("q_proj", "k_proj", "v_proj")), fused_linears(mlp, ("gate_proj", "up_proj")))

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                 cache: SlotCache) -> torch.Tensor:
        hidden = self.embed.forward(ids)
        cos, sin = self.rotary(hidden, positions)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        batch = ids.shape[0]
        shape = (batch, 1, -1, self.head_dim)
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
            keys, values = cache.update(k, v, index)
            heads, kv_heads = q.shape[1], keys.shape[1]
            grouped = q.reshape(batch, kv_heads, heads // kv_heads, self.head_dim)
            attended = decode_attention(grouped, keys, values, mask, self.scaling)
            attended = attended.reshape(batch, heads, 1, self.head_dim).transpose(1, 2).contiguous()
            hidden = residual + layer.o(attended.reshape(batch, 1, -1).contiguous())
            residual = hidden
            hidden = _norm(hidden, layer.post_norm, layer.post_eps)
            if layer.gate_up is not None:
                gate, up = layer.gate_up(hidden).chunk(2, dim=-1)
                hidden = residual + layer.down(F.silu(gate) * up)
            else:
                hidden = residual + layer.down(F.silu(layer.gate(hidden)) * layer.up(hidden))
        hidden = _norm(hidden, self.norm, self.norm_eps)
        return self.lm_head(hidden)[:, -1, :]


def fast_decode_for(model: Any) -> FastDecode | None:
    """A :class:`FastDecode` of ``model``, or None where :func:`unsupported_reason` says it cannot run it."""
    return None if unsupported_reason(model) is not None else FastDecode(model)
