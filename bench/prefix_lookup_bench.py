"""The local engine's prefix lookups in a rollout's shape: the index against comparing every cached prefix.

    .venv/bin/python bench/prefix_lookup_bench.py                  # 256 prefixes, 128 lookups, 5 rounds
    .venv/bin/python bench/prefix_lookup_bench.py --prefixes 512 --lookups 256

Every new row of an admission looks up the idle slot whose cached prefix its prompt continues
(``agentr1.engine.prefix.PrefixIndex.longest``), on the engine's thread, between decode steps. In a
rollout the prompts share their first ~150 ids (the system prompt) and differ after: the baseline, in the same run,
is what the engine did before (until 2026-12-04): compare the prompt with every prefix that starts like it (binary
search over slice equality), the most recently used winning ties. Prints milliseconds per admission of
``--lookups`` rows (median of rounds) and the ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections import OrderedDict

from agentr1.engine.prefix import CHUNK, PrefixIndex, common_prefix


def scan_longest(prefixes: OrderedDict[int, list[int]], prompt: list[int]) -> tuple[int | None, int]:
    """The baseline: every prefix compared with the prompt; ties to the most recently used (last in order)."""
    best, length = None, 0
    for slot, tokens in prefixes.items():
        if tokens[:CHUNK] != prompt[:CHUNK]:
            continue
        n = common_prefix(tokens, prompt)
        if n >= length:
            best, length = slot, n
    return best, length


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefixes", type=int, default=256)
    parser.add_argument("--lookups", type=int, default=128)
    parser.add_argument("--shared", type=int, default=150, help="ids every prompt starts with (a system prompt)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(0)
    system = [rng.randrange(1000, 5000) for _ in range(args.shared)]

    def prompt() -> list[int]:
        return system + [rng.randrange(1000, 5000) for _ in range(67)]

    stored = [(prompt() + [7] * 64)[: (args.shared + 130) // CHUNK * CHUNK] for _ in range(args.prefixes)]
    index, scanned = PrefixIndex(), OrderedDict()
    for slot, tokens in enumerate(stored):
        index.add(slot, tokens)
        scanned[slot] = tokens
    prompts = [prompt() for _ in range(args.lookups)]
    times: dict[str, list[float]] = {"index": [], "scan": []}
    for _ in range(args.rounds):
        for name, look in (("index", index.longest), ("scan", lambda p: scan_longest(scanned, p))):
            started = time.perf_counter()
            found = [look(p)[1] for p in prompts]
            times[name].append(1000 * (time.perf_counter() - started))
            assert all(n // CHUNK == args.shared // CHUNK for n in found), name
    ours, base = statistics.median(times["index"]), statistics.median(times["scan"])
    print(f"{args.lookups} lookups over {args.prefixes} prefixes sharing {args.shared} ids: index {ours:.2f} ms, "
          f"comparing every prefix {base:.2f} ms ({base / ours:.0f}x)")
    print(json.dumps({"bench": "prefix_lookup", **vars(args), "ms": times}))


if __name__ == "__main__":
    main()
