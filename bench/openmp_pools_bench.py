"""What an idle OpenMP pool in another thread costs a decode-shaped loop (agentr1.core.openmp).

A thread ("the engine") runs ``--products`` small products of the laptop demo's decode shape (16 rows x 576 ->
1536) on 2 OpenMP threads, with a few microseconds of Python between them, three times: alone; after another
thread ran one parallel product and kept its pool (libgomp then manages more threads than CPUs and throttles
spinning); after that other thread ended its pool with ``release_openmp_threads``. Prints wall, user and system
seconds and voluntary context switches of each, and one JSON line.

    .venv/bin/python bench/openmp_pools_bench.py [--products 3000]
"""

from __future__ import annotations

import argparse
import json
import resource
import threading
import time

import torch

from agentr1.core.openmp import release_openmp_threads


def decode_loop(products: int) -> dict[str, float]:
    x, w = torch.randn(16, 576), torch.randn(1536, 576)
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(products):
        torch.nn.functional.linear(x, w)
        sum(range(200))  # the Python between two products of a decode step
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"wall_s": round(time.perf_counter() - started, 3), "user_s": round(after.ru_utime - before.ru_utime, 3),
            "sys_s": round(after.ru_stime - before.ru_stime, 3), "context_switches": after.ru_nvcsw - before.ru_nvcsw}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--products", type=int, default=3000)
    args = parser.parse_args()
    torch.set_num_threads(2)
    results: dict[str, dict[str, float]] = {}
    phase, go = threading.Event(), threading.Event()
    order = ["alone", "another thread keeps a pool", "that thread ended its pool"]

    def engine() -> None:
        for name in order:
            go.wait()
            go.clear()
            results[name] = decode_loop(args.products)
            phase.set()

    thread = threading.Thread(target=engine, name="engine")
    thread.start()
    # the other thread stays alive with its pool through the second phase (a thread that ends frees its pool), as a
    # trainer's executor thread does between its jobs, then ends the pool itself
    keeper_done, keeper_stop = threading.Event(), threading.Event()

    def keeper() -> None:
        torch.mm(torch.randn(512, 512), torch.randn(512, 512))
        keeper_done.set()
        keeper_stop.wait()
        release_openmp_threads()
        keeper_done.set()

    for name in order:
        if name == "another thread keeps a pool":
            threading.Thread(target=keeper, daemon=True).start()
            keeper_done.wait()
        elif name == "that thread ended its pool":
            keeper_done.clear()
            keeper_stop.set()
            keeper_done.wait()
        go.set()
        phase.wait()
        phase.clear()
    thread.join()
    print("| phase | wall s | user s | system s | context switches |\n|---|---|---|---|---|")
    for name in order:
        r = results[name]
        print(f"| {name} | {r['wall_s']} | {r['user_s']} | {r['sys_s']} | {r['context_switches']} |")
    print(json.dumps({"products": args.products, **results}))


if __name__ == "__main__":
    main()
