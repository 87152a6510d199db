"""Policy-update speed: one GRPO update of :class:`~agentr1.trainer.policy.LocalPolicy` on a fixed synthetic
batch, under each of several policy settings, alternating in one process.

    .venv/bin/python bench/update_bench.py                                   # float32 vs bf16 compute, the demo's shape
    .venv/bin/python bench/update_bench.py --rows 8 --repeat 1 --variants '{}' '{"gradient_checkpointing": false}'

The batch has the laptop demo's shape (``examples/chains/demo.yaml``): groups whose rows share a prompt of
``--prompt-tokens`` ids (the chains agent's system message and task), responses of two or three model calls with
tool results between them (no loss on those), advantages +1/-1, mini-batches of 2 rows, micro-batches of at most
1,024 tokens, gradient checkpointing, the demo's learning rate. Ids are random (the speed does not depend on them).
Each variant (a JSON object of :class:`~agentr1.trainer.policy.PolicyConfig` fields over that base) builds
a fresh policy, runs one update, and is freed before the next; ``--repeat`` rounds alternate the variants. Prints
a markdown table (wall and CPU seconds of the update, seconds per row, the ratio to the first variant's best) and
one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agentr1.core import resolve_model
from agentr1.trainer.policy import LocalPolicy
from agentr1.trainer.rows import Segment, TrainRow

BASE = dict(lr=2e-5, ppo_mini_batch_size=2, ppo_max_token_len_per_gpu=1024, gradient_checkpointing=True,
            device="cpu", seed=0)


def demo_rows(groups: int, per_group: int, prompt_tokens: int, seed: int = 0) -> list[TrainRow]:
    """Rows shaped like the demo's: per group one prompt, per row 2-3 calls of 25-45 tokens with 30-token
    tool results between them."""
    rng = random.Random(seed)
    rows = []
    for group in range(groups):
        prompt = [rng.randrange(100, 49000) for _ in range(prompt_tokens + 5 * group)]
        for k in range(per_group):
            response: list[int] = []
            mask: list[int] = []
            segments = []
            for call in range(2 + k % 2):
                if call:
                    response += [rng.randrange(100, 49000) for _ in range(30)]  # the tool's result: no loss
                    mask += [0] * 30
                length = rng.randrange(25, 46)
                segments.append(Segment(call, len(response), len(response) + length))
                response += [rng.randrange(100, 49000) for _ in range(length)]
                mask += [1] * length
            advantage = 1.0 if k % 2 == 0 else -1.0
            rows.append(TrainRow(prompt_ids=prompt, response_ids=response, response_mask=mask,
                                 old_logprobs=[0.0] * len(response), token_rewards=[0.0] * len(response),
                                 segments=segments, session_id=f"s{group}-{k}", group_id=f"g{group}",
                                 advantages=[advantage * m for m in mask], has_old_logprobs=False))
    return rows


def run_variant(model: str, rows: list[TrainRow], variant: dict[str, Any]) -> dict[str, float]:
    policy = LocalPolicy(model, **{**BASE, **variant})
    wall, cpu = time.perf_counter(), time.process_time()
    metrics = policy.update(rows)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    del policy
    gc.collect()
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "pg_loss": round(float(metrics.get("actor/pg_loss", 0)), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--rows", type=int, default=4, help="rows per group")
    parser.add_argument("--prompt-tokens", type=int, default=258)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=['{"param_dtype": "fp32"}', '{"param_dtype": "bf16"}'],
                        help="JSON objects of PolicyConfig fields over the base")
    args = parser.parse_args()
    model = str(resolve_model(args.model))
    rows = demo_rows(args.groups, args.rows, args.prompt_tokens)
    tokens = sum(len(r.prompt_ids) + len(r.response_ids) for r in rows)
    variants = [json.loads(v) for v in args.variants]
    runs: dict[int, list[dict[str, float]]] = {i: [] for i in range(len(variants))}
    for _ in range(args.repeat):
        for i, variant in enumerate(variants):
            runs[i].append(run_variant(model, rows, variant))
    print(f"\n{len(rows)} rows, {tokens} tokens; base {BASE}; load average {os.getloadavg()[0]:.1f}\n")
    print("| variant | update wall s (each run) | CPU s (best) | s per row (best) | best / first variant's best |")
    print("|---|---|---:|---:|---:|")
    first = min(r["wall_s"] for r in runs[0])
    for i, variant in enumerate(variants):
        best = min(runs[i], key=lambda r: r["wall_s"])
        print(f"| `{json.dumps(variant)}` | {', '.join(str(r['wall_s']) for r in runs[i])} | {best['cpu_s']} | "
              f"{best['wall_s'] / len(rows):.2f} | {best['wall_s'] / first:.2f} |")
    print(json.dumps({"bench": "update", "rows": len(rows), "tokens": tokens,
                      "variants": [{"variant": v, "runs": runs[i]} for i, v in enumerate(variants)]}))


if __name__ == "__main__":
    main()
