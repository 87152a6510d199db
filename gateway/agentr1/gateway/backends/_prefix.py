"""Which token prefixes the local engine's idle cache slots hold, keyed by token ids alone.

When a request finishes, its slot keeps the keys and values of ``prompt + output[:-1]``. The next
turn of an agent session extends exactly those ids (the gateway guarantees it), so it finds the
slot here by its longest common prefix and prefills only the new tokens. Nothing about sessions
is needed: two requests share a prefix exactly when their token ids do. Entries are evicted least
recently used first when their slots are needed. Rows admitted together share too: :func:`share_segments`
finds the segments of one prefill forward that repeat an earlier segment's positions and prompt ids.
"""

from __future__ import annotations

from collections import OrderedDict

from ._rows import Row

__all__ = ["CHUNK", "MIN_REUSE", "PrefixIndex", "Segment", "common_prefix", "share_segments"]

CHUNK = 16  # the engine's prefill chunk grid; reused prefixes end on it (16 rows keep CPU matmuls row-invariant)
MIN_REUSE = 16  # shorter shared prefixes are not worth a lookup (and key the buckets)


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


class PrefixIndex:
    """Idle slots and the token ids whose keys/values they hold, least recently used first."""

    def __init__(self) -> None:
        self._tokens: OrderedDict[int, list[int]] = OrderedDict()
        self._buckets: dict[tuple[int, ...], set[int]] = {}

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
        self._buckets.setdefault(tuple(tokens[:MIN_REUSE]), set()).add(slot)
        return True

    def remove(self, slot: int) -> list[int] | None:
        tokens = self._tokens.pop(slot, None)
        if tokens is not None:
            key = tuple(tokens[:MIN_REUSE])
            bucket = self._buckets[key]
            bucket.discard(slot)
            if not bucket:
                del self._buckets[key]
        return tokens

    def clear(self) -> None:
        self._tokens.clear()
        self._buckets.clear()

    def longest(self, prompt: list[int]) -> tuple[int | None, int]:
        """The idle slot sharing the longest prefix with ``prompt`` and that length (None, 0 if none
        shares at least MIN_REUSE ids); ties go to the most recently used slot."""
        best, length = None, 0
        for slot in self._buckets.get(tuple(prompt[:MIN_REUSE]), ()):
            n = common_prefix(self._tokens[slot], prompt)
            if n > length or (n == length and best is not None and self._newer(slot, best)):
                best, length = slot, n
        return best, length

    def touch(self, slot: int) -> None:
        self._tokens.move_to_end(slot)

    def _newer(self, a: int, b: int) -> bool:
        order = list(self._tokens)
        return order.index(a) > order.index(b)


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
