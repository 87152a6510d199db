"""Resizing the slot cache keeps the moved slots' prefixes and nothing else, and frees the old cache before it
allocates the new one: a cache growing during a rollout peaks at the new cache and the moved prefixes, not at
both caches."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from agentr1.core.allocator import JEMALLOC_CONF, jemalloc_library
from agentr1.engine.slot_cache import SlotCache

CONFIG = SimpleNamespace(num_hidden_layers=3, num_key_value_heads=2, head_dim=8, num_attention_heads=4, hidden_size=32)


def _random_cache(slots: int, capacity: int) -> SlotCache:
    cache = SlotCache(CONFIG, torch.device("cpu"), torch.float32)
    cache.resize(slots, capacity, {})
    generator = torch.Generator().manual_seed(0)
    cache._all_keys.copy_(torch.randn(cache._all_keys.shape, generator=generator))
    cache._all_values.copy_(torch.randn(cache._all_values.shape, generator=generator))
    return cache


@pytest.mark.parametrize(("slots", "capacity"), [(12, 49), (4, 17)], ids=["grow", "shrink"])
def test_resize_keeps_moved_prefixes_and_zeroes_the_rest(slots: int, capacity: int) -> None:
    cache = _random_cache(8, 33)
    old_keys, old_values = cache._all_keys.clone(), cache._all_values.clone()
    moves = {5: 0, 0: 3, 7: 1} if slots < 8 else {5: 0, 0: 9, 7: 11}
    cache.resize(slots, capacity, moves)

    keep = min(33, capacity) - 1  # never the old scratch column
    expected_keys = torch.zeros(3, slots, 2, capacity, 8)
    expected_values = torch.zeros(3, slots, 2, capacity, 8)
    for old, new in moves.items():
        expected_keys[:, new, :, :keep] = old_keys[:, old, :, :keep]
        expected_values[:, new, :, :keep] = old_values[:, old, :, :keep]
    assert torch.equal(cache._all_keys, expected_keys)
    assert torch.equal(cache._all_values, expected_values)
    assert (cache.slots, cache.capacity, cache.scratch) == (slots, capacity, capacity - 1)
    for layer in range(3):  # the per-layer tensors are views of the new cache
        assert cache.keys[layer].data_ptr() == cache._all_keys[layer].data_ptr()
        assert cache.values[layer].data_ptr() == cache._all_values[layer].data_ptr()


# Runs in a process of its own, so its peak RSS is this resize's alone. A cache of 2 x 201 MB (float32) grows by half
# (2 x 302 MB) keeping 2 of its 32 slots (2 x 12.6 MB). clear_refs "5" resets VmHWM to the current RSS.
_MEASURE_RESIZE = """
from types import SimpleNamespace
import torch
from agentr1.engine.slot_cache import SlotCache

def kib(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))

config = SimpleNamespace(num_hidden_layers=8, num_key_value_heads=4, head_dim=64)
cache = SlotCache(config, torch.device("cpu"), torch.float32)
base = kib("VmRSS")
cache.resize(32, 769, {})
cache._all_keys.fill_(1.0)
cache._all_values.fill_(2.0)
old = 2 * cache._all_keys.nbytes
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")
cache.resize(32, 1153, {3: 0, 17: 31})
new = 2 * cache._all_keys.nbytes
print((kib("VmHWM") - base) * 1024, old, new)
"""


@pytest.mark.parametrize("malloc", ["glibc", "jemalloc"])
def test_resize_frees_the_old_cache_before_allocating_the_new(malloc: str) -> None:
    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("needs Linux's /proc/self/clear_refs to reset the peak RSS")
    # plain glibc malloc, which unmaps freed blocks this large: nothing preloaded, no malloc settings inherited
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("MALLOC_")}
    if malloc == "jemalloc":  # as the agentr1 command runs: jemalloc keeping what is freed (JEMALLOC_CONF)
        library = jemalloc_library()
        if library is None:
            pytest.skip("this system has no jemalloc (libjemalloc2)")
        env.update(LD_PRELOAD=library, MALLOC_CONF=JEMALLOC_CONF)
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE_RESIZE], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    peak, old, new = map(int, done.stdout.split())
    mb = 1e6
    assert peak < new + old // 4, (
        f"resize peaked at {peak / mb:.0f} MB over the process's start: old cache "
        f"{old / mb:.0f} MB, new {new / mb:.0f} MB (both: {(old + new) / mb:.0f} MB)"
    )
