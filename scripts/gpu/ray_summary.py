"""Throughput and MFU of the update step of a `trainer.policy=ray` run, and its learning curve.

Usage: python scripts/gpu/ray_summary.py RUN_DIR MODEL_DIR N_GPUS [PEAK_FLOPS]

Per training step, from RUN_DIR/metrics.jsonl: ``perf/tokens_per_s`` (real prompt+response tokens
of the update, ppo_epochs counted, over the update's wall time: recomputing old log-probs, the
forward and backward passes, the optimizer steps) divided by N_GPUS, and

    MFU = 6 * N * tokens_per_s_per_gpu / PEAK_FLOPS

with N the model's parameter count (embeddings included) and PEAK_FLOPS the dense bf16 peak of one
H100/H200 SXM, 989e12 FLOP/s. 6N counts a forward and a backward pass per token; the old-log-prob
forward (2N more per token) and attention FLOPs are not counted, so this MFU is a lower bound.
verl's own estimate (``actor/mfu``: its FlopsCounter, attention included, over the time of each
optimizer step only) is printed next to it when the workers reported it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

H200_BF16_DENSE_PEAK = 989e12


def parameter_count(model_dir: str) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    return sum(p.numel() for p in model.parameters())


def main(run_dir: str, model_dir: str, gpus: int, peak: float = H200_BF16_DENSE_PEAK) -> None:
    params = parameter_count(model_dir)
    rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if line.strip()]
    print(f"model {model_dir}: {params / 1e6:.1f}M parameters; {gpus} GPU(s); peak {peak:.3g} FLOP/s per GPU")
    print("step  reward/mean  success/val  update_s  tokens/s/GPU  MFU(6N)  verl_mfu  step_s")
    rates = []
    for r in rows:
        if "perf/tokens_per_s" not in r:
            print(f"{r.get('step', '?'):>4}  (evaluation only)  success/val={r.get('success/val', float('nan')):.3f}")
            continue
        per_gpu = r["perf/tokens_per_s"] / gpus
        rates.append(per_gpu)
        mfu = 6 * params * per_gpu / peak
        print(f"{r['step']:>4}  {r.get('reward/mean', float('nan')):>11.3f}  {r.get('success/val', float('nan')):>11.3f}"
              f"  {r['perf/update_s']:>8.2f}  {per_gpu:>12.0f}  {mfu:>7.2%}  {r.get('actor/mfu', float('nan')):>8.2%}"
              f"  {r.get('perf/step_s', float('nan')):>6.1f}")
    if rates:
        steady = rates[1:] or rates  # the first update includes compilation and warm-up
        mean = sum(steady) / len(steady)
        print(f"update step, mean over steps 2..: {mean:.0f} tokens/s per GPU, MFU {6 * params * mean / peak:.2%} "
              f"(6N x tokens/s / {peak:.3g})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *(float(a) for a in sys.argv[4:5]))
