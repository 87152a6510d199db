"""The matrix products of one SmolLM2-135M decode step on the CPU, at the engine's batch sizes, three ways.

    .venv/bin/python bench/cpu_linear_bench.py [--rows 16] [--threads 1] [--rounds 3]

For each weight shape of the model (per layer: q, k/v, o, gate/up, down; then the tied lm_head over the
49,152-token vocabulary) it times ``F.linear(x, W)`` (MKL: what ``generate`` and the engine
ran before), ``x @ W.T`` on a transposed copy, and oneDNN with the weight reordered once (the engine's
``PackedLinear``, ``engine/packed_linear.py``, what it runs on the CPU since 2026-12-05), best of ``--rounds``; random
float32 weights of the real shapes, 30 of each layer shape taken in turn (``--warm``: one, which stays in the
caches). It prints GFLOP/s and the weight bytes read per second for each (for F.linear and oneDNN), the time of one
decode step's products (30 layers + lm_head) each way, and first the rate the machine reads memory at on the same
threads (a sum over 512 MiB): a product whose weights stream faster than that read them from the caches, one well
below it is bound by its arithmetic or by how it walks memory.

    .venv/bin/python bench/cpu_linear_bench.py --fused [--dtype bfloat16] [--threads 2]

times one decode step's per-layer products on oneDNN two ways instead, in interleaved rounds: each layer's own
(q, k, v, o, gate, up, down: seven products) against its siblings fused (q/k/v and gate/up stacked,
``FusedLinears``: four products), 30 layers of random weights of the real shapes.
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch
import torch.nn.functional as F
from torch import nn

from agentr1.engine.packed_linear import fused_linears, pack_linears

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


def read_rate(rounds: int) -> float:
    """Bytes per second this machine reads from memory on the bench's threads: the sum of a 512 MiB float32 tensor
    (larger than any cache a laptop has), best of ``rounds``."""
    data = torch.ones(128 << 20)
    return data.numel() * 4 / best_time(data.sum, 1, rounds)


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


class _Layer(nn.Module):
    """One SmolLM2 decoder layer's linear layers, named as transformers names them."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        for name, (k, n) in {"q_proj": (576, 576), "k_proj": (576, 192), "v_proj": (576, 192), "o_proj": (576, 576),
                             "gate_proj": (576, 1536), "up_proj": (576, 1536), "down_proj": (1536, 576)}.items():
            setattr(self, name, nn.Linear(k, n, bias=False, dtype=dtype))


def fused_step(rows: int, rounds: int, dtype: torch.dtype) -> None:
    """One decode step's per-layer products, each layer's own against the siblings fused (see the module docstring)."""
    ways = {}
    for fuse in (False, True):
        layers = [_Layer(dtype) for _ in range(LAYERS)]
        for layer in layers:
            pack_linears(layer, fuse=fuse)
        ways["fused" if fuse else "separate"] = layers
    x, h = torch.randn(rows, 576, dtype=dtype), torch.randn(rows, 1536, dtype=dtype)

    def separate() -> None:
        for m in ways["separate"]:
            m.q_proj(x), m.k_proj(x), m.v_proj(x), m.o_proj(x), m.gate_proj(x), m.up_proj(x), m.down_proj(h)

    def fused() -> None:
        for m in ways["fused"]:
            fused_linears(m, ("q_proj", "k_proj", "v_proj"))(x), m.o_proj(x)
            fused_linears(m, ("gate_proj", "up_proj"))(x), m.down_proj(h)

    times: dict[str, list[float]] = {"separate": [], "fused": []}
    for _ in range(rounds):
        times["separate"].append(best_time(separate, 20, 1))
        times["fused"].append(best_time(fused, 20, 1))
    print(f"{dtype}, {rows} rows, {torch.get_num_threads()} thread(s), {rounds} interleaved rounds of 20 steps\n")
    print("| round | separate ms | fused ms | fused / separate |\n|---:|---:|---:|---:|")
    for i, (a, b) in enumerate(zip(times["separate"], times["fused"], strict=True), 1):
        print(f"| {i} | {a * 1e3:.2f} | {b * 1e3:.2f} | {b / a:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", action="store_true", help="one weight per shape, warm in the caches (default: 30)")
    parser.add_argument("--fused", action="store_true", help="time each layer's products against fused siblings")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="with --fused")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.fused:
        fused_step(args.rows, args.rounds, getattr(torch, args.dtype))
        return
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.rows} rows, best of {args.rounds}, "
          f"{'one weight per shape' if args.warm else f'{LAYERS} weights per layer shape, taken in turn'}\n")
    print(f"memory read: {read_rate(args.rounds) / 1e9:.1f} GB/s on {args.threads} thread(s) (a 512 MiB sum)\n")
    print("| product | in x out | F.linear ms | GFLOP/s | GB/s of weights | x @ W.T ms | oneDNN ms | oneDNN / F.linear "
          "| oneDNN GFLOP/s | oneDNN GB/s of weights |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    step = {"F.linear": 0.0, "x @ W.T": 0.0, "oneDNN": 0.0}
    for name, (k, n) in SHAPES.items():
        copies = 1 if args.warm or name == "lm_head" else LAYERS
        times = time_product(args.rows, k, n, args.rounds, copies)
        for way, seconds in times.items():
            step[way] += seconds * PER_STEP[name]
        flops, weight_bytes = 2 * args.rows * k * n, 4 * k * n
        base = times["F.linear"]
        print(f"| {name} | {k} x {n} | {base * 1e3:.3f} | {flops / base / 1e9:.1f} | {weight_bytes / base / 1e9:.1f} | "
              f"{times['x @ W.T'] * 1e3:.3f} | {times['oneDNN'] * 1e3:.3f} | {times['oneDNN'] / base:.2f} | "
              f"{flops / times['oneDNN'] / 1e9:.1f} | {weight_bytes / times['oneDNN'] / 1e9:.1f} |")
    print("\none decode step's products (30 layers + lm_head): " +
          ", ".join(f"{way} {seconds * 1e3:.1f} ms" for way, seconds in step.items()))


if __name__ == "__main__":
    main()
