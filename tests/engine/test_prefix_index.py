"""The local engine's prefix index: which idle slot a prompt continues, found by whole chunks of ids."""

from __future__ import annotations

import random

from agentr1.engine.prefix import CHUNK, PrefixIndex, common_prefix


def ids(*chunks: int, tail: int = 0) -> list[int]:
    """Whole chunks of ids (chunk k: CHUNK copies of k), then ``tail`` ids of 0."""
    return [c for c in chunks for _ in range(CHUNK)] + [0] * tail


def test_the_slot_sharing_the_most_chunks_and_its_exact_common_prefix():
    index = PrefixIndex()
    index.add(1, ids(1, 2))
    index.add(2, ids(1, 2, 3, 4))
    index.add(3, ids(1, 5))
    assert index.longest(ids(1, 2, 3, 9)) == (2, 3 * CHUNK)
    assert index.longest(ids(1, 5, 6)) == (3, 2 * CHUNK)
    assert index.longest(ids(1, 2, 3, 4, tail=5)) == (2, 4 * CHUNK)
    assert index.longest(ids(7, 1, 2)) == (None, 0)  # no first chunk in common
    assert index.longest([1] * (CHUNK - 1)) == (None, 0)  # less than a chunk
    assert not index.add(4, [1] * (CHUNK - 1)) and 4 not in index  # too short to keep


def test_a_prefix_the_prompt_continues_wins_then_the_most_recently_used():
    index = PrefixIndex()
    index.add(1, ids(1, 2, 3))  # passes through (1, 2) and goes on
    index.add(2, ids(1, 2))  # ends there: the previous turn of a prompt that continues (1, 2)
    index.add(3, ids(1, 2, 4))
    assert index.longest(ids(1, 2, 9)) == (2, 2 * CHUNK)
    index.remove(2)
    assert index.longest(ids(1, 2, 9)) == (3, 2 * CHUNK)  # the most recently added of the two left
    index.touch(1)
    assert index.longest(ids(1, 2, 9)) == (1, 2 * CHUNK)
    assert index.slots() == [3, 1]  # least recently used first


def test_removing_and_replacing_prefixes_leaves_no_trace():
    index = PrefixIndex()
    index.add(1, ids(1, 2, 3))
    index.add(2, ids(1, 2))
    assert index.remove(1) == ids(1, 2, 3) and index.remove(1) is None
    assert index.longest(ids(1, 2, 3)) == (2, 2 * CHUNK)
    index.add(2, ids(5, 6))  # the slot now holds other ids
    assert index.longest(ids(1, 2)) == (None, 0) and index.longest(ids(5, 6)) == (2, 2 * CHUNK)
    assert len(index) == 1 and index.tokens(2) == ids(5, 6)
    index.clear()
    assert len(index) == 0 and index.longest(ids(5, 6)) == (None, 0)


def test_against_comparing_the_prompt_with_every_prefix():
    """Random prefixes over a small alphabet (long shared runs): the slot found shares as many whole chunks as the
    best of a comparison with every prefix, and its common prefix is reported exactly."""
    rng = random.Random(7)
    index, held = PrefixIndex(), {}
    for step in range(600):
        slot = rng.randrange(40)
        if rng.random() < 0.2:
            index.remove(slot)
            held.pop(slot, None)
            continue
        tokens = [rng.randrange(2) for _ in range(rng.randrange(0, 6 * CHUNK))]
        if index.add(slot, tokens):
            held[slot] = tokens
        else:
            held.pop(slot, None)
        prompt = [rng.randrange(2) for _ in range(rng.randrange(1, 7 * CHUNK))]
        best, shared = index.longest(prompt)
        whole = max((common_prefix(t, prompt) // CHUNK for t in held.values()), default=0)
        if whole == 0:
            assert best is None, step
            continue
        assert shared == common_prefix(held[best], prompt) and shared // CHUNK == whole, step
    assert sorted(index.slots()) == sorted(held)
