"""Peak resident memory of the policy update per token budget: what the CPU's memory defaults are fitted to.

Each variant (a JSON object of :class:`~agentr1.trainer.policy.PolicyConfig` fields) runs in a process of its own:
it builds :class:`~agentr1.trainer.policy.LocalPolicy` on the model, runs one update (after it the optimizer's
state exists, as in every later update), then for each budget, smallest first, sets the update's token budget,
resets the process's high-water mark (``/proc/self/clear_refs``) and runs one update on rows of exactly
``--row-tokens`` tokens that fill one micro-batch (no padding). The rows carry rollout log-probs and the update runs
in ``bypass_mode`` (no log-prob pass). Per budget: the resident memory before, the peak during, the rise, and what
:mod:`agentr1.trainer.policy.memory_budget` estimates: the rise (``tokens x token_bytes``) and the whole peak
(``update_bytes``).

    .venv/bin/python bench/update_peak_bench.py                            # without and with gradient checkpointing
    .venv/bin/python bench/update_peak_bench.py --budgets 1024 2048 --variants '{"param_dtype": "bf16"}'
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

GIB = 2**30


def uniform_rows(count: int, tokens: int, seed: int = 0) -> list[Any]:
    """``count`` rows of ``tokens`` ids each: a quarter prompt, the rest a response with advantages +1 / -1."""
    from agentr1.trainer.rows import Segment, TrainRow

    rng = random.Random(seed)
    prompt_len = tokens // 4
    rows = []
    for k in range(count):
        response = [rng.randrange(100, 49000) for _ in range(tokens - prompt_len)]
        advantage = 1.0 if k % 2 == 0 else -1.0
        rows.append(TrainRow(prompt_ids=[rng.randrange(100, 49000) for _ in range(prompt_len)],
                             response_ids=response, response_mask=[1] * len(response),
                             old_logprobs=[-2.0] * len(response), token_rewards=[0.0] * len(response),
                             segments=[Segment(0, 0, len(response))], session_id=f"s{k}", group_id="g",
                             advantages=[advantage] * len(response)))
    return rows


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def measure(model: str, budgets: list[int], row_tokens: int, variant: dict[str, Any]) -> list[dict[str, Any]]:
    """In this process: per budget, smallest first, the resident memory before one update and its peak."""
    from agentr1.core import release_freed_memory
    from agentr1.trainer.policy import LocalPolicy

    policy = LocalPolicy(model, device="cpu", ppo_max_token_len_per_gpu=min(budgets), bypass_mode=True, seed=0,
                         **variant)
    policy.update(uniform_rows(max(1, min(budgets) // row_tokens), row_tokens))  # the optimizer's state, allocated
    out = []
    for budget in sorted(budgets):
        policy.actor.engine_config.max_token_len_per_gpu = budget  # what the policy sends verl with every batch
        rows = uniform_rows(max(1, budget // row_tokens), row_tokens)
        release_freed_memory(keep_bytes=0)
        before = _status_kib("VmRSS") * 1024
        Path("/proc/self/clear_refs").write_text("5")  # the high-water mark starts again from the RSS now
        policy.update(rows)
        peak = _status_kib("VmHWM") * 1024
        out.append({"budget": budget, "variant": variant, "before_gib": round(before / GIB, 3),
                    "peak_gib": round(peak / GIB, 3), "rise_gib": round((peak - before) / GIB, 3)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--budgets", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--row-tokens", type=int, default=256)
    parser.add_argument("--variants", nargs="+",
                        default=['{"gradient_checkpointing": false}', '{"gradient_checkpointing": true}'],
                        help="JSON objects of PolicyConfig fields")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    from agentr1.core import resolve_model

    model = str(resolve_model(args.model))
    if args.child:
        print(json.dumps(measure(model, args.budgets, args.row_tokens, json.loads(args.child))))
        return
    results: list[dict[str, Any]] = []
    for text in args.variants:
        done = subprocess.run([sys.executable, __file__, "--model", model, "--row-tokens", str(args.row_tokens),
                               "--budgets", *map(str, args.budgets), "--child", text], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{text} failed:\n{done.stderr[-3000:]}")
        results += json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(results[-len(args.budgets):]), file=sys.stderr)
    from agentr1.trainer.policy.memory_budget import ModelShape, token_bytes, update_bytes

    shape = ModelShape.from_model(model)
    print(f"\n{args.model}: {shape}; rows of {args.row_tokens} tokens\n")
    print("| variant | budget | RSS before, GiB | peak, GiB | rise, GiB | estimated rise | estimated peak |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        v = {"gradient_checkpointing": True, "param_dtype": "fp32", **r["variant"]}  # the CPU's "auto": on
        kind = {"checkpointing": bool(v["gradient_checkpointing"]), "bf16": v["param_dtype"] == "bf16"}
        rise = r["budget"] * token_bytes(shape, **kind)
        print(f"| `{json.dumps(r['variant'])}` | {r['budget']} | {r['before_gib']} | {r['peak_gib']} | "
              f"{r['rise_gib']} | {rise / GIB:.2f} | {update_bytes(shape, r['budget'], **kind) / GIB:.2f} |")
    print(json.dumps({"bench": "update_peak", "model": args.model, "row_tokens": args.row_tokens,
                      "results": results}))


if __name__ == "__main__":
    main()
