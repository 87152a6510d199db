"""The local engine's GPU decode attention (two batched products over the slot cache's views) computes
what SDPA computes. The check is a plain function of device and dtype so that
``bench/engine_gpu_bench.py`` runs it on a GPU in bfloat16 (the path the engine takes there); here it
runs on the CPU in float32."""

from __future__ import annotations

import torch

from agentr1.engine.slot_cache import one_token_attention

FLOAT32_TOLERANCE = 1e-5


def check_one_token_attention_matches_sdpa(device: str, dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(0)
    for group in (3, 1):  # SmolLM2's 9 query heads over 3 key/value heads; one query head per key head
        rows, kv_heads, capacity, dim, length = 6, 3, 96, 64, 70
        cache = torch.randn(2, rows + 2, kv_heads, capacity, dim, generator=generator) * 2
        cache = cache.to(device, dtype)
        key, value = cache[0, :rows, :, :length], cache[1, :rows, :, :length]  # views, as the engine reads them
        query = (torch.randn(rows, kv_heads, group, dim, generator=generator) * 2).to(device, dtype)
        positions = torch.tensor([0, 5, 69, 33, 12, 47], device=device)
        mask = (torch.arange(length, device=device)[None, :] <= positions[:, None])[:, None, None, :]
        expected = torch.nn.functional.scaled_dot_product_attention(
            query.float(), key.float(), value.float(), attn_mask=mask, scale=0.125)
        got = one_token_attention(query, key, value, mask, 0.125)
        assert got.dtype == dtype and got.shape == expected.shape
        error = (got.float() - expected).abs().max().item()
        # in bfloat16 the bar is SDPA's own error on the same inputs (what the engine used before), with room
        # for rounding in another order; in float32 both are exact to float noise
        sdpa = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=0.125)
        bar = max(FLOAT32_TOLERANCE, 2 * (sdpa.float() - expected).abs().max().item())
        assert error <= bar, f"group {group}: max error {error:.2e}, SDPA's bar {bar:.2e}"
        # row 0 may attend to its first position only: its output is that position's value
        assert torch.allclose(got[0].float(), value[0, :, :1].float().expand(kv_heads, group, dim), atol=bar)


def test_one_token_attention_matches_sdpa_over_cache_views() -> None:
    check_one_token_attention_matches_sdpa("cpu", torch.float32)
