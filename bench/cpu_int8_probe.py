"""Would int8 weights make CPU rollouts faster without changing the policy? Speed and accuracy of PyTorch's
dynamic int8 quantisation (``torch.ao.quantization.quantize_dynamic``: int8 weights, activations quantised per
call) on SmolLM2-135M-Instruct, against the float32 model the trainer computes log-probabilities with.

    .venv/bin/python bench/cpu_int8_probe.py [--threads 1] [--rows 16] [--samples 3]

Speed: one decode step's forward of ``--rows`` rows (one token each, no cache: the products dominate), float32
against each quantised variant, in the same process. Accuracy: for ``--samples`` chat prompts, a continuation
of 48 tokens sampled from the float32 model, then per token the KL(float32 || variant) of the next-token
distributions and |log p_float32 - log p_variant| of the sampled token (what the PPO ratio would see).
Variants: the float32 model with its weights rounded to bfloat16 (the size of error a bf16 serving engine adds;
a check that the probe reads small differences as small), every linear layer (per-tensor weight scales), every linear layer with per-channel weight scales,
the decoder layers only (the tied lm_head stays float32), the MLPs only.
"""

from __future__ import annotations

import argparse
import copy
import time
import warnings

import torch
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

from agentr1.core.models import resolve_model

PROMPTS = ["What is 23 + 58? Use the calculator.", "Explain why the sky is blue.", "Compute 17 - 15, then add 60."]


def variants(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    per_channel = {torch.nn.Linear: per_channel_dynamic_qconfig}
    rounded = copy.deepcopy(model)  # a check of the probe: a small weight perturbation gives a small KL
    with torch.no_grad():
        for param in rounded.parameters():
            param.copy_(param.to(torch.bfloat16).float())
    out = {"float32, weights rounded to bfloat16 (no speed-up: a check of the probe)": rounded,"all linears": quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8),
           "all linears, per-channel": quantize_dynamic(copy.deepcopy(model), per_channel, dtype=torch.qint8)}
    layers_only = copy.deepcopy(model)
    layers_only.model = quantize_dynamic(layers_only.model, per_channel, dtype=torch.qint8)
    out["decoder layers (lm_head float32)"] = layers_only
    mlp_only = copy.deepcopy(model)
    for layer in mlp_only.model.layers:
        layer.mlp = quantize_dynamic(layer.mlp, per_channel, dtype=torch.qint8)
    out["MLPs only"] = mlp_only
    return out


def step_ms(model: torch.nn.Module, rows: int, repeat: int = 5) -> float:
    ids = torch.randint(0, 1000, (rows, 1))
    with torch.inference_mode():
        model(ids)
        started = time.perf_counter()
        for _ in range(repeat):
            model(ids)
    return (time.perf_counter() - started) / repeat * 1000


def divergence(reference: torch.nn.Module, other: torch.nn.Module, sequences: list[tuple[torch.Tensor, int]]) -> tuple[float, float]:
    kls, gaps = [], []
    with torch.inference_mode():
        for full, start in sequences:
            ref = torch.log_softmax(reference(full).logits[0, start - 1:-1].float(), -1)
            got = torch.log_softmax(other(full).logits[0, start - 1:-1].float(), -1)
            sampled = full[0, start:, None]
            kls.append((ref.exp() * (ref - got)).sum(-1))
            gaps.append((ref.gather(-1, sampled) - got.gather(-1, sampled)).abs()[:, 0])
    return torch.cat(kls).mean().item(), torch.cat(gaps).mean().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*deprecated.*")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    path = resolve_model("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    sequences = []
    for text in (PROMPTS * args.samples)[: args.samples]:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
        ids = torch.tensor([tokenizer(prompt)["input_ids"]])
        with torch.inference_mode():
            full = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=48, do_sample=True,
                                  temperature=1.0, top_k=0, top_p=1.0)
        sequences.append((full, ids.shape[1]))
    base = step_ms(model, args.rows)
    print(f"| variant | decode step of {args.rows} rows, ms ({args.threads} thread) | speed-up | KL(float32 || variant), "
          "nats/token | mean abs log-prob gap of the sampled token |")
    print("|---|---:|---:|---:|---:|")
    print(f"| float32 | {base:.1f} | 1.00x | 0 | 0 |")
    for name, variant in variants(model).items():
        ms = step_ms(variant, args.rows)
        kl, gap = divergence(model, variant, sequences)
        print(f"| {name} | {ms:.1f} | {base / ms:.2f}x | {kl:.3f} | {gap:.3f} |")


if __name__ == "__main__":
    main()
