"""How an admission's prefill is planned (prefill_plan.py): the exact mode's one chunk per row and forward, segments
that rows admitted together share, runs of forwards within the token budget, and their flat layout."""

from __future__ import annotations

import torch

from agentr1.core.generation import SamplingParams
from agentr1.engine.prefill_plan import flat_layout, passes, plan_forwards
from agentr1.engine.rows import Row


def row(ids: list[int], slot: int, cached: int = 0) -> Row:
    return Row(ids, SamplingParams(), sink=None, slot=slot, cached=cached)  # type: ignore[arg-type]


def test_exact_forwards_are_one_chunk_per_row_and_alike_segments_are_computed_once() -> None:
    common = list(range(100, 132))  # two chunks every row shares
    a, b = row([*common, 1, 2, 3], 0), row([*common, 1, 2, 3], 1)  # alike: b reads a's logits
    c = row([*common, *range(200, 220)], 2, cached=16)  # its first chunk came from the prefix cache
    forwards = plan_forwards([a, b, c], exact=True, budget=1024, prefix_cache=True)
    assert [[(s, e) for _, s, e in f.segments] for f in forwards] == [
        [(0, 16), (0, 16)], [(16, 32)], [(16, 32), (16, 32)], [(32, 48)], [(32, 35), (32, 35)], [(48, 52)]]
    assert [len(f.leaders) for f in forwards] == [1, 1, 1, 1, 1, 1]  # a computes what b shares
    assert forwards[4].finished == [0, 1] and forwards[4].logit_rows == [0, 0]  # b samples from a's logits
    assert forwards[5].finished == [0] and forwards[5].logit_rows is None and forwards[3].finished == []
    assert [f.tokens for f in forwards] == [16, 16, 16, 16, 3, 4]
    assert [[f.tokens for f in run] for run in passes(forwards, 32)] == [[16, 16], [16, 16], [3, 4]]
    assert len(passes(forwards, 8)) == 5  # a forward over the budget runs alone


def test_a_flat_layout_holds_each_forwards_real_queries_padded_as_its_forward_did() -> None:
    a, b = row(list(range(10, 30)), slot=3), row(list(range(50, 53)), slot=5)  # 20 and 3 tokens
    forwards = plan_forwards([a, b], exact=True, budget=1024, prefix_cache=True)
    flat = flat_layout(forwards, exact=True, length_step=64, scratch=127, pad_id=0, device=torch.device("cpu"))
    assert flat.real == 23 and flat.ids.numel() == 32  # rounded up to a multiple of 16 rows
    assert flat.ids[:23].tolist() == [*range(10, 26), *range(50, 53), *range(26, 30)]
    assert flat.ids[23:].tolist() == [10] * 9  # repeats of the first query
    assert flat.cols[:23].tolist() == [*range(16), 0, 1, 2, 16, 17, 18, 19]
    assert flat.slots[:23].tolist() == [3] * 16 + [5] * 3 + [3] * 4
    first, second = flat.groups
    assert (first.rows, first.width, first.kv_len) == (2, 16, 16) and (second.rows, second.kv_len) == (1, 32)
    assert first.padded.tolist() == [*range(16), 29, 30, 31]  # b's three queries at the end of its padded row
    assert second.flat.tolist() == [19, 20, 21, 22] and second.padded.tolist() == [12, 13, 14, 15]
    assert first.last is not None and first.last.tolist() == [15, 18]  # b finishes in the first forward
    assert second.last is not None and second.last.tolist() == [22]
    assert first.mask.shape == (2, 1, 16, 16) and bool(first.mask[1, 0, 0, 0]) and not bool(first.mask[1, 0, 0, 1])
