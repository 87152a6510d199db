"""Which token prefixes the local engine's idle cache slots hold, keyed by token ids alone.

When a request finishes, its slot keeps the keys and values of ``prompt + output[:-1]``. The next
turn of an agent session extends exactly those ids (the gateway guarantees it), so it finds the
slot here by its longest common prefix and prefills only the new tokens. Nothing about sessions
is needed: two requests share a prefix exactly when their token ids do. Entries are evicted least
recently used first when their slots are needed. Rows admitted together share too: :func:`share_segments`
finds the segments of one prefill forward that repeat an earlier segment's positions and prompt ids.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterator

from .rows import Row

__all__ = ["CHUNK", "MIN_REUSE", "PrefixIndex", "Segment", "common_prefix", "share_segments"]

CHUNK = 16  # the engine's prefill chunk grid; reused prefixes end on it (16 rows keep CPU matmuls row-invariant)
MIN_REUSE = CHUNK  # shorter shared prefixes are not worth a lookup (one chunk of the lookup tree)


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists (binary search over slice equality)."""
    low, high = 0, min(len(a), len(b))
    if a[:high] == b[:high]:
        return high
    while low < high:  # invariant: a[:low] == b[:low] and a[:high + 1] != b[:high + 1]
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


class _Node:
    """A chunk of :data:`CHUNK` ids in the prefix tree: the idle slots whose prefixes run through it."""

    __slots__ = ("children", "ends", "slots")

    def __init__(self) -> None:
        self.children: dict[tuple[int, ...], _Node] = {}
        self.slots: set[int] = set()  # prefixes that hold this chunk (and every chunk above it)
        self.ends: set[int] = set()  # those of them that end with it


class PrefixIndex:
    """Idle slots and the token ids whose keys/values they hold, least recently used first.

    Looked up by a tree of :data:`CHUNK`-id chunks: reuse is whole chunks anyway, and a rollout's prompts
    share their first chunks (a system prompt), where comparing a prompt with every cached prefix cost
    128 lookups over 256 prefixes 0.6 s of the engine thread (this VM; ``bench/prefix_lookup_bench.py``)."""

    def __init__(self) -> None:
        self._tokens: OrderedDict[int, list[int]] = OrderedDict()
        self._used: dict[int, int] = {}  # slot -> when it was last added or touched (larger: more recent)
        self._clock = itertools.count()
        self._root = _Node()

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, slot: int) -> bool:
        return slot in self._tokens

    def slots(self) -> list[int]:
        """Idle slots, least recently used first."""
        return list(self._tokens)

    def tokens(self, slot: int) -> list[int]:
        return self._tokens[slot]

    def add(self, slot: int, tokens: list[int]) -> bool:
        """Remember that ``slot`` holds ``tokens``; False (nothing kept) when they are too short."""
        self.remove(slot)
        if len(tokens) < MIN_REUSE:
            return False
        self._tokens[slot] = tokens
        self._used[slot] = next(self._clock)
        node = self._root
        for chunk in _chunks(tokens):
            node = node.children.setdefault(chunk, _Node())
            node.slots.add(slot)
        node.ends.add(slot)
        return True

    def remove(self, slot: int) -> list[int] | None:
        tokens = self._tokens.pop(slot, None)
        if tokens is None:
            return None
        del self._used[slot]
        node = self._root
        for chunk in _chunks(tokens):
            child = node.children[chunk]
            child.slots.discard(slot)
            child.ends.discard(slot)
            if not child.slots:  # (nothing below it either)
                del node.children[chunk]
                break
            node = child
        return tokens

    def clear(self) -> None:
        self._tokens.clear()
        self._used.clear()
        self._root = _Node()

    def longest(self, prompt: list[int]) -> tuple[int | None, int]:
        """An idle slot sharing the most whole chunks with ``prompt``, and its common prefix with ``prompt`` (None, 0
        if none shares a chunk, :data:`MIN_REUSE` ids). Among those: one that ends there (a previous turn this
        prompt continues), then the most recently used."""
        node, deepest = self._root, None
        for chunk in _chunks(prompt):
            node = node.children.get(chunk)  # type: ignore[assignment]
            if node is None:
                break
            deepest = node
        if deepest is None:
            return None, 0
        best = max(deepest.ends or deepest.slots, key=self._used.__getitem__)
        return best, common_prefix(self._tokens[best], prompt)

    def touch(self, slot: int) -> None:
        self._tokens.move_to_end(slot)
        self._used[slot] = next(self._clock)


def _chunks(ids: list[int]) -> Iterator[tuple[int, ...]]:
    """The whole :data:`CHUNK`-id chunks of ``ids``, in order."""
    for start in range(0, len(ids) - CHUNK + 1, CHUNK):
        yield tuple(ids[start:start + CHUNK])


Segment = tuple[Row, int, int]  # a row's prompt positions start..end-1, prefilled in one forward


def share_segments(segments: list[Segment]) -> tuple[list[Segment], list[int]]:
    """The segments to compute (leaders) and, per segment, the index of its leader: the first segment
    of the same positions of the same prompt ids. Rows with images lead themselves."""
    leaders: list[Segment] = []
    lead: list[int] = []
    seen: dict[tuple[int, int, tuple[int, ...]], list[int]] = {}
    for row, start, end in segments:
        found = None
        if row.multimodal is None and row.embeds is None:
            candidates = seen.setdefault((start, end, tuple(row.prompt_ids[start:end])), [])
            found = next((j for j in candidates if leaders[j][0].prompt_ids[:start] == row.prompt_ids[:start]),
                         None)
            if found is None:
                candidates.append(len(leaders))
        if found is None:
            found = len(leaders)
            leaders.append((row, start, end))
        lead.append(found)
    return leaders, lead
