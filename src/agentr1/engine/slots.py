"""Which slot of the local engine's KV cache each running row and each cached prefix holds.

Runs on the engine's worker thread only (see :mod:`.batch`). Running rows stay packed at the bottom of the
cache (slots ``0..top``: a decode step covers them all), idle prefixes (:class:`~.prefix.PrefixIndex`) live in
the slots above them, and the cache (:class:`~.slot_cache.SlotCache`) grows, re-packing rows and the newest
prefixes, when newcomers need more slots or positions. A row that starts with a cached prefix gets its keys and
values copied in (or continues them in place) and prefills only the rest; a finished row's prompt becomes a
prefix of its own, aligned to the prefill chunk grid (:data:`~.prefix.CHUNK`).
"""

from __future__ import annotations

import logging

from .graphs import LENGTH_STEP
from .images import reusable_length
from .prefix import CHUNK, MIN_REUSE, PrefixIndex
from .rows import Row
from .slot_cache import SlotCache

__all__ = ["RESERVE_AHEAD", "SlotTable", "reserved_length", "round_up"]

log = logging.getLogger(__name__)

RESERVE_AHEAD = 1024  # positions a row reserves past the tokens it has, at most: the cache grows as it decodes on


def reserved_length(row: Row) -> int:
    """The positions ``row`` needs in the cache now: its prompt, the tokens it has sampled and up to
    :data:`RESERVE_AHEAD` more (all of ``max_new_tokens`` when that is fewer). A call without ``max_tokens`` may
    run to the model's context: reserving that for every row up front would hold ``max_context`` positions per
    row (a Qwen2.5 float32 row: 0.8 GB) whatever it samples."""
    made = len(row.output_ids) + row.in_flight
    return len(row.prompt_ids) + min(row.sampling.max_new_tokens, made + RESERVE_AHEAD)


def round_up(n: int, step: int) -> int:
    """``n`` rounded up to a multiple of ``step``."""
    return -(-n // step) * step


class SlotTable:
    """The slots of ``cache``: one per running row (``rows[slot]``), the idle ones indexed as prefixes."""

    def __init__(self, cache: SlotCache, *, max_slots: int, cache_bytes: int, max_context: int,
                 prefix_cache: bool, image_id: int | None) -> None:
        self.cache = cache
        self.max_slots = max_slots  # running rows + as many idle prefixes
        self.cache_bytes = cache_bytes
        self.max_context = max_context
        self.prefix_cache = prefix_cache
        self.image_id = image_id
        self.prefixes = PrefixIndex()
        self.rows: list[Row | None] = []

    def reset(self) -> None:
        """Forget every row and cached prefix (after a failure)."""
        self.rows = [None] * self.cache.slots
        self.prefixes.clear()

    def reserve(self, running: list[Row], newcomers: list[Row]) -> bool:
        """Grow the cache (and re-pack it) when the newcomers need more slots or positions: as many slots as
        twice the rows (room for as many cached prefixes), within ``cache_bytes``. True when it was re-packed
        (the slots' count or capacity changed, and running rows may have moved). Called with no newcomers when a
        running row outgrows the cache (:func:`reserved_length`)."""
        everyone = running + newcomers
        need = min(max(reserved_length(r) for r in everyone), self.max_context)
        capacity = self.cache.capacity
        longer = round_up(need, LENGTH_STEP) + 1 > capacity
        if longer:  # grow by half at least, up to the model's context
            grown = min(round_up(capacity * 3 // 2, LENGTH_STEP), round_up(self.max_context, LENGTH_STEP)) + 1
            capacity = max(round_up(need, LENGTH_STEP) + 1, grown if capacity else 0)
        budget = max(8, self.cache_bytes // (capacity * self.cache.bytes_per_token))
        slots = max(len(everyone), min(self.max_slots, round_up(2 * len(everyone), 8), budget))
        if not longer and slots <= self.cache.slots:
            return False
        self._repack(running, slots if longer else max(slots, self.cache.slots), capacity)
        return True

    def _repack(self, running: list[Row], slots: int, capacity: int) -> None:
        """Reallocate the cache: running rows at the bottom (slots 0..), idle prefixes at the top."""
        moves: dict[int, int] = {}
        for row in sorted(running, key=lambda r: r.slot):
            moves[row.slot] = len(moves)
        idle = list(reversed(self.prefixes.slots()))[: slots - len(moves)]  # newest first
        kept = {s: self.prefixes.tokens(s) for s in idle}
        for i, slot in enumerate(idle):
            moves[slot] = slots - 1 - i
        used = max([len(r.prompt_ids) + len(r.output_ids) + r.in_flight for r in running]
                   + [len(tokens) for tokens in kept.values()], default=0)  # the positions moved slots hold
        self.cache.resize(slots, capacity, moves, used)
        self.prefixes.clear()
        for slot in reversed(idle):
            self.prefixes.add(moves[slot], kept[slot])
        for row in running:
            row.slot = moves[row.slot]
        self.rows = [None] * slots
        for row in running:
            self.rows[row.slot] = row
        log.info("local engine: KV cache %d slots x %d positions (%.2f GB)", slots, capacity,
                 slots * capacity * self.cache.bytes_per_token / 1e9)

    def _free_slots(self) -> list[int]:
        return [s for s, r in enumerate(self.rows) if r is None and s not in self.prefixes]

    def claim(self, row: Row) -> None:
        """Give ``row`` the lowest slot without a running row and copy in the longest cached prefix of its
        prompt (``row.cached`` positions). Running rows stay packed at the bottom, since a decode step covers
        slots ``0..top``: when that lowest slot holds an idle prefix, the prefix moves up (to the highest free
        slot, else over the least recently used prefix, or it trades places with the prefix this row continues)
        instead of the row."""
        best, reuse = None, 0
        if self.prefix_cache:
            best, shared = self.prefixes.longest(row.prompt_ids)
            reuse = (min(shared, len(row.prompt_ids) - 1, reusable_length(row.prompt_ids, self.image_id))
                     // CHUNK) * CHUNK
            if best is None or reuse < MIN_REUSE:
                best, reuse = None, 0
        free = self._free_slots()
        idle = self.prefixes.slots()  # least recently used first
        if not free and not idle:  # reserve sized the cache for every row: a bug if reached
            raise RuntimeError("local engine: no KV cache slot left for a new row")
        slot = min(free[:1] + idle)
        if slot in self.prefixes:  # an idle prefix sits in the lowest open slot
            if free:  # it moves to the highest free slot (a row that continues it finds its keys in place)
                self._move_prefix(slot, free[-1])
                best = None if best == slot else best
            elif best is not None and best != slot:  # the two prefixes trade places; the row consumes its own
                self.cache.swap_prefixes(slot, best, max(reuse, len(self.prefixes.tokens(slot))))
                self.prefixes.remove(best)
                self.prefixes.add(best, self.prefixes.remove(slot) or [])
                best = None  # its keys are in place now
            elif best == slot:  # the row continues this prefix in place
                self.prefixes.remove(slot)
                best = None
            elif idle[0] != slot:  # nothing to continue: it takes the least recently used prefix's place
                self._move_prefix(slot, idle[0])
            else:
                self.prefixes.remove(slot)
        if best is not None and best != slot:
            self.cache.copy_prefix(best, slot, reuse)
            self.prefixes.touch(best)  # it stays cached: other rows may share it (a group, a retry)
        row.slot, row.cached = slot, reuse
        self.rows[slot] = row

    def _move_prefix(self, source: int, target: int) -> None:
        """Copy the idle prefix at ``source`` to ``target`` (dropping what ``target`` held) and index it there;
        ``source`` is left to a running row (its keys and values stay as they are)."""
        tokens = self.prefixes.remove(source) or []
        self.prefixes.remove(target)
        self.cache.copy_prefix(source, target, len(tokens))
        self.prefixes.add(target, tokens)

    def release(self, row: Row, *, keep: bool) -> None:
        """Free ``row``'s slot; with ``keep``, its prompt's full chunks are cached as a prefix (in the
        highest free slot, replacing a cached prefix it extends, else the least recently used one)."""
        slot = row.slot
        if slot < 0 or slot >= len(self.rows) or self.rows[slot] is not row:
            return
        self.rows[slot] = None
        row.slot = -1
        row.embeds = None
        tokens = row.prompt_ids[: (reusable_length(row.prompt_ids, self.image_id) // CHUNK) * CHUNK]
        if not (keep and self.prefix_cache and len(tokens) >= MIN_REUSE):
            return
        best, shared = self.prefixes.longest(tokens)
        if best is not None and shared == len(tokens):
            self.prefixes.touch(best)  # already cached (this prefix or a longer one)
            return
        if best is not None and shared == len(self.prefixes.tokens(best)):
            target = best  # the previous turn of the same session: replace it
        else:
            free = self._free_slots()
            target = free[-1] if free else self.prefixes.slots()[0]
        self.prefixes.remove(target)
        if target != slot:
            self.cache.copy_prefix(slot, target, len(tokens))
        self.prefixes.add(target, tokens)
