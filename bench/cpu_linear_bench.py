"""The matrix products of one SmolLM2-135M decode step on the CPU, at the engine's batch sizes, three ways.

    .venv/bin/python bench/cpu_linear_bench.py [--rows 16] [--threads 1] [--rounds 3]

For each weight shape of the model (per layer: q, k/v, o, gate/up, down; then the tied lm_head over the
49,152-token vocabulary) it times ``F.linear(x, W)`` (MKL: what ``generate`` and the engine
ran before), ``x @ W.T`` on a transposed copy, and oneDNN with the weight reordered once (the engine's
``PackedLinear``, ``engine/packed_linear.py``, what it runs on the CPU since 2026-12-05), best of ``--rounds``; random
float32 weights of the real shapes, 30 of each layer shape taken in turn (``--warm``: one, which stays in the
caches). It prints GFLOP/s and the weight bytes read per second for each, and the time of one decode step's products
(30 layers + lm_head) each way.
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch
import torch.nn.functional as F

from agentr1.engine.packed_linear import pack_linears

LAYERS = 30
SHAPES = {"q": (576, 576), "k,v": (576, 192), "o": (576, 576), "gate,up": (576, 1536), "down": (1536, 576),
          "lm_head": (576, 49152)}  # (in, out); k,v and gate,up run twice per layer
PER_STEP = {"q": LAYERS, "k,v": 2 * LAYERS, "o": LAYERS, "gate,up": 2 * LAYERS, "down": LAYERS, "lm_head": 1}


def best_time(fn, reps: int, rounds: int) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - started) / reps)
    return best


def time_product(rows: int, k: int, n: int, rounds: int, copies: int) -> dict[str, float]:
    """Seconds of one ``rows x k`` by ``k x n`` product, each way, cycling over ``copies`` weights of the shape
    (as a decode step meets 30 layers' weights, none of them still in the caches)."""
    x = torch.randn(rows, k)
    weights = [torch.randn(n, k) * 0.02 for _ in range(copies)]
    transposed = [w.t().contiguous() for w in weights]
    packed = []
    for w in weights:
        layer = torch.nn.Linear(k, n, bias=False)
        layer.weight.data = w.clone()
        assert pack_linears(layer) == 1
        packed.append(layer)
    reps = copies * (2 if n > 10_000 else 20)
    turn = itertools.count()
    return {"F.linear": best_time(lambda: F.linear(x, weights[next(turn) % copies]), reps, rounds),
            "x @ W.T": best_time(lambda: x @ transposed[next(turn) % copies], reps, rounds),
            "oneDNN": best_time(lambda: packed[next(turn) % copies](x), reps, rounds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", action="store_true", help="one weight per shape, warm in the caches (default: 30)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.rows} rows, best of {args.rounds}, "
          f"{'one weight per shape' if args.warm else f'{LAYERS} weights per layer shape, taken in turn'}\n")
    print("| product | in x out | F.linear ms | GFLOP/s | GB/s of weights | x @ W.T ms | oneDNN ms | oneDNN / F.linear |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    step = {"F.linear": 0.0, "x @ W.T": 0.0, "oneDNN": 0.0}
    for name, (k, n) in SHAPES.items():
        copies = 1 if args.warm or name == "lm_head" else LAYERS
        times = time_product(args.rows, k, n, args.rounds, copies)
        for way, seconds in times.items():
            step[way] += seconds * PER_STEP[name]
        flops, weight_bytes = 2 * args.rows * k * n, 4 * k * n
        base = times["F.linear"]
        print(f"| {name} | {k} x {n} | {base * 1e3:.3f} | {flops / base / 1e9:.1f} | {weight_bytes / base / 1e9:.1f} | "
              f"{times['x @ W.T'] * 1e3:.3f} | {times['oneDNN'] * 1e3:.3f} | {times['oneDNN'] / base:.2f} |")
    print("\none decode step's products (30 layers + lm_head): " +
          ", ".join(f"{way} {seconds * 1e3:.1f} ms" for way, seconds in step.items()))


if __name__ == "__main__":
    main()
