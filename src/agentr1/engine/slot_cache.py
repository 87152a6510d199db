"""The local engine's KV cache: a fixed grid of slots, one sequence per slot, written in place.

Per layer one key and one value tensor ``[slots, kv_heads, capacity, head_dim]``, views of one
tensor of all layers each (so copying a prefix between slots is two copies, not two per layer: an
admission and a retirement each copy one per row). A sequence keeps
its tokens at their own positions ``0..n-1`` of its slot (no left padding, no concatenation), so a
decode step writes one column per row and a finished sequence can stay where it is as a reusable
prefix (see :mod:`.prefix`). The last column of every slot is scratch: rows that only pad a batch
write there, and no mask ever lets a query read it.

The cache plugs into a HF causal LM through ``past_key_values``: before each forward the engine
sets where the new keys go (:meth:`SlotCache.begin`), the model calls :meth:`SlotCache.update` in
every layer, and a 4-D boolean attention mask (``[batch, 1, queries, kv_len]``, built by the
engine) is used by the model as it is. Decode steps of ``B`` rows read the first ``B`` slots in
place (views, nothing copied), which is what lets a CUDA graph replay them.

:func:`use_grouped_decode_attention` registers an attention function that computes one-token
queries of grouped-query models without repeating keys and values per query head (on a GPU, and in
float32 on the CPU, as two batched matrix products, :func:`one_token_attention`: :func:`decode_attention`);
everything else goes to transformers' SDPA attention unchanged.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from agentr1.core import release_freed_memory

__all__ = ["ATTENTION_NAME", "SlotCache", "attention_kernels", "decode_attention", "exact_decode_attention",
           "one_token_attention", "use_grouped_decode_attention"]

ATTENTION_NAME = "agentr1_slots"


class SlotCache:
    """Keys and values of ``slots`` sequences of up to ``capacity - 1`` tokens each."""

    def __init__(self, config: Any, device: torch.device, dtype: torch.dtype) -> None:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.layers = int(text.num_hidden_layers)
        self.kv_heads = int(getattr(text, "num_key_value_heads", None) or text.num_attention_heads)
        self.head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)
        self.device, self.dtype = device, dtype
        self.slots = 0
        self.capacity = 0
        self.keys: list[torch.Tensor] = []  # views of _all_keys, one per layer
        self.values: list[torch.Tensor] = []
        self._all_keys = self._all_values = torch.zeros(0)
        self._write_rows: torch.Tensor | None = None  # where the next forward's keys go, in a layer's [-1, head_dim] view
        self._read_slots: torch.Tensor | None = None
        self._rows = 0
        self._kv_len = 0

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * torch.empty((), dtype=self.dtype).element_size()

    @property
    def scratch(self) -> int:
        """The scratch column (never attended to)."""
        return self.capacity - 1

    def resize(self, slots: int, capacity: int, moves: dict[int, int], used: int | None = None) -> None:
        """Reallocate as ``slots`` x ``capacity``, copying slot ``old`` to slot ``new`` for each of
        ``moves`` (the prefix each slot holds, its first ``used`` positions: all of them up to the smaller
        capacity when None).

        The moved prefixes are copied out and the old cache freed (its pages given back on the CPU, where
        jemalloc would keep them) before the new one is allocated, so the peak holds the new cache and those
        prefixes, not both caches (it grows during a rollout)."""
        keep = min(self.capacity, capacity) - 1
        if used is not None:
            keep = min(keep, used)
        kept = None
        if moves and keep > 0:
            old = torch.tensor(list(moves), dtype=torch.long, device=self.device)
            # the slice is taken as a view first, so the index copies only [layers, moves, heads, keep, dim]
            kept = self._all_keys[:, old, :, :keep], self._all_values[:, old, :, :keep]
        self.keys, self.values = [], []  # views of the old tensors: drop them too
        self._all_keys = self._all_values = torch.zeros(0)
        if self.device.type == "cpu":  # under jemalloc the old cache's pages stay the process's until given back
            release_freed_memory(keep_bytes=0)
        self.slots = self.capacity = 0  # an empty cache until the new one is there
        shape = (self.layers, slots, self.kv_heads, capacity, self.head_dim)
        self._all_keys = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self._all_values = torch.zeros(shape, dtype=self.dtype, device=self.device)
        if kept is not None:
            new = torch.tensor(list(moves.values()), dtype=torch.long, device=self.device)
            self._all_keys[:, new, :, :keep] = kept[0]
            self._all_values[:, new, :, :keep] = kept[1]
        self.keys, self.values = list(self._all_keys.unbind(0)), list(self._all_values.unbind(0))
        self.slots, self.capacity = slots, capacity

    def copy_prefix(self, source: int, target: int, length: int) -> None:
        """Copy the first ``length`` positions of slot ``source`` into slot ``target`` (all layers)."""
        self._all_keys[:, target, :, :length] = self._all_keys[:, source, :, :length]
        self._all_values[:, target, :, :length] = self._all_values[:, source, :, :length]

    def copy_columns(self, source: int, targets: list[int] | torch.Tensor, start: int, end: int,
                     layer: int | None = None) -> None:
        """Copy positions ``start..end-1`` of slot ``source`` into each slot of ``targets`` (all layers, or ``layer``)."""
        index = torch.as_tensor(targets, dtype=torch.long, device=self.device)
        if layer is None:
            pairs = [self._all_keys, self._all_values]
        else:
            pairs = [self.keys[layer][None], self.values[layer][None]]
        for cache in pairs:
            cache[:, index, :, start:end] = cache[:, source : source + 1, :, start:end]

    def swap_prefixes(self, a: int, b: int, length: int) -> None:
        """Exchange the first ``length`` positions of slots ``a`` and ``b`` (all layers)."""
        for cache in (self._all_keys, self._all_values):
            held = cache[:, a, :, :length].clone()
            cache[:, a, :, :length] = cache[:, b, :, :length]
            cache[:, b, :, :length] = held

    def begin(
        self, write_slots: torch.Tensor, write_cols: torch.Tensor, kv_len: int, read_slots: torch.Tensor | None
    ) -> None:
        """Set the next forward's layout: query ``j`` of batch row ``i`` writes its key and value at
        ``(write_slots[i, 0], write_cols[i, j])``; the attention reads the first ``kv_len`` positions
        of the slots ``read_slots`` (None: slots ``0..rows-1``, in place)."""
        heads = torch.arange(self.kv_heads, device=write_slots.device)[None, :, None]
        # query j of row i, head h: row ((slot * kv_heads + h) * capacity + column) of the layer's [-1, head_dim] view
        rows = (write_slots[:, :1, None] * self.kv_heads + heads) * self.capacity + write_cols[:, None, :]
        self._write_rows = rows.reshape(-1)
        self._read_slots, self._rows, self._kv_len = read_slots, write_slots.shape[0], kv_len

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Called by every attention layer: store the new keys/values, return what to attend to."""
        self.write(key_states, value_states, layer_idx)
        return self.read(layer_idx, self._read_slots, self._kv_len)

    def write(self, key_states: torch.Tensor, value_states: torch.Tensor, layer: int) -> None:
        """Store ``layer``'s new keys and values where :meth:`begin` said."""
        k, v = self.keys[layer], self.values[layer]
        # one row copy per key ([batch, heads, queries, dim] in the order of _write_rows): an index_put of the same
        # writes took 4-50x longer on the CPU
        k.view(-1, self.head_dim).index_copy_(0, self._write_rows, key_states.reshape(-1, self.head_dim).to(k.dtype))
        v.view(-1, self.head_dim).index_copy_(0, self._write_rows, value_states.reshape(-1, self.head_dim).to(v.dtype))

    def read(self, layer: int, slots: torch.Tensor | None, kv_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``layer``'s keys and values of the first ``kv_len`` positions of ``slots`` (None: slots ``0..rows-1`` of the
        last :meth:`begin`, in place)."""
        k, v = self.keys[layer], self.values[layer]
        if slots is None:
            return k[: self._rows, :, :kv_len], v[: self._rows, :, :kv_len]
        return k[slots, :, :kv_len], v[slots, :, :kv_len]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # the engine always passes positions: the model never asks

    def __len__(self) -> int:
        return self.layers


def attention_kernels(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """SDPA without the cuDNN kernel on a GPU: it plans per input shape, and prefill shapes change
    with every admission. A no-op on the CPU."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def _grouped_decode_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    batch, q_heads, queries, dim = query.shape
    kv_heads = key.shape[1]
    one_query = queries == 1 and attention_mask is not None and attention_mask.dim() == 4
    if one_query and attention_mask.dtype == torch.bool and exact_decode_attention(query):  # a decode step
        grouped = query.reshape(batch, kv_heads, q_heads // kv_heads, dim)
        out = decode_attention(grouped, key, value, attention_mask, scaling)
        return out.reshape(batch, q_heads, 1, dim).transpose(1, 2).contiguous(), None
    if not one_query or kv_heads == q_heads:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    # one query per row: the heads of a group become that group's queries (same keys, same mask)
    grouped = query.reshape(batch, kv_heads, q_heads // kv_heads, dim)
    out = decode_attention(grouped, key, value, attention_mask, scaling)
    return out.reshape(batch, q_heads, 1, dim).transpose(1, 2).contiguous(), None


def exact_decode_attention(query: torch.Tensor) -> bool:
    """Whether :func:`one_token_attention` runs a decode step's attention: on a GPU (any dtype), and in float32
    on the CPU (where ``bmm`` has no float32 output for bfloat16 inputs)."""
    return query.is_cuda or query.dtype == torch.float32


def decode_attention(grouped: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                     scale: float | None) -> torch.Tensor:
    """Attention of the grouped one-token queries of a decode step (``[B, kv_heads, g, d]``): two batched
    products where :func:`exact_decode_attention` says so, else SDPA. On the CPU SDPA's flash kernel gives
    results that change with the number of threads (its last bits, measured at 3 and 16 rows), the
    products do not: the engine's thread count may change while it runs (``cpu_threads.py``), what it samples
    must not."""
    if mask.dtype == torch.bool and exact_decode_attention(grouped):
        return one_token_attention(grouped, key, value, mask, scale)
    return torch.nn.functional.scaled_dot_product_attention(grouped, key, value, attn_mask=mask, scale=scale)


def one_token_attention(grouped: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                        scale: float | None) -> torch.Tensor:
    """Attention of a few queries per key/value head (``grouped`` [B, kv_heads, g, d]) over ``key`` and
    ``value`` [B, kv_heads, L, d] under a boolean ``mask`` [B, 1, 1, L] (True: attend), as two batched
    matrix products: scores in float32 (cuBLAS accumulates and returns them in float32), a float32
    softmax, probabilities cast to the values' dtype for the second product (as flash kernels do).

    On the GPU this is what a decode step's attention is: SDPA's masked kernel tiles 64 queries where a
    row has ``g`` (3 for SmolLM2) and ran at a quarter of the bandwidth the slot cache allows (H200
    profile in docs/benchmarks.md). ``key``/``value`` may be views of the cache: merging their first two
    dimensions needs no copy."""
    batch, kv_heads, group, dim = grouped.shape
    length = key.shape[2]
    q = grouped.reshape(batch * kv_heads, group, dim)
    k = key.reshape(batch * kv_heads, length, dim).transpose(1, 2)
    v = value.reshape(batch * kv_heads, length, dim)
    if q.dtype == torch.float32:
        scores = torch.bmm(q, k)
    else:
        scores = torch.bmm(q, k, out_dtype=torch.float32)
    scores = scores.view(batch, kv_heads, group, length) * (scale if scale is not None else dim**-0.5)
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).to(v.dtype)
    return torch.bmm(probs.view(batch * kv_heads, group, length), v).view(batch, kv_heads, group, dim)


def use_grouped_decode_attention(model: Any) -> bool:
    """Switch ``model`` (loaded with SDPA attention) to the grouped decode attention; False when
    this transformers version does not allow it (the model then keeps SDPA)."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

        AttentionInterface.register(ATTENTION_NAME, _grouped_decode_attention)
        AttentionMaskInterface.register(ATTENTION_NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
        model.set_attn_implementation(ATTENTION_NAME)
    except Exception:  # an optional speed-up
        return False
    return getattr(model.config, "_attn_implementation", None) == ATTENTION_NAME
