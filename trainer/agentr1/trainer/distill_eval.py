"""How close a student is to its teacher on held-out prompts (the measure of on-policy distillation).

The contexts are fixed: each held-out chat prompt followed by the teacher's greedy continuation,
built once, so the numbers before and after training compare the same positions. At every
continuation position both models' full next-token distributions are compared:

- ``reverse_kl``: exact ``KL(student || teacher)`` over the vocabulary, mean over positions (the
  quantity OPD's per-token signal estimates with one sample);
- ``agreement``: how often the student's greedy token equals the teacher's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["HeldOutContexts", "agreement_with_teacher", "teacher_contexts"]


@dataclass
class HeldOutContexts:
    prompts: list[list[int]]  # rendered chat prompts
    continuations: list[list[int]]  # the teacher's greedy continuation of each


def _load(path: str | os.PathLike[str]) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(Path(path), dtype=torch.float32, attn_implementation="sdpa").eval()


@torch.inference_mode()
def teacher_contexts(teacher: str | os.PathLike[str], questions: list[str], *, max_new_tokens: int = 24
                     ) -> HeldOutContexts:
    """Render each question as a one-turn chat and let the teacher continue it greedily."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(teacher)
    model = _load(teacher)
    prompts, continuations = [], []
    for question in questions:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False)
        ids = list(ids["input_ids"] if isinstance(ids, dict) else ids)
        out = model.generate(torch.tensor([ids]), max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        prompts.append(ids)
        continuations.append(out[0, len(ids):].tolist())
    return HeldOutContexts(prompts, continuations)


@torch.inference_mode()
def agreement_with_teacher(student: str | os.PathLike[str], teacher: str | os.PathLike[str],
                           contexts: HeldOutContexts) -> dict[str, float]:
    """``reverse_kl`` and ``agreement`` of ``student`` with ``teacher`` on ``contexts`` (see the module doc)."""
    s_model, t_model = _load(student), _load(teacher)
    kl_sum, agree, positions = 0.0, 0, 0
    for prompt, continuation in zip(contexts.prompts, contexts.continuations, strict=True):
        if not continuation:
            continue
        ids = torch.tensor([prompt + continuation])
        start = len(prompt) - 1  # the logits predicting the first continuation token
        s_logp = torch.log_softmax(s_model(input_ids=ids).logits[0, start:-1].float(), dim=-1)
        t_logp = torch.log_softmax(t_model(input_ids=ids).logits[0, start:-1].float(), dim=-1)
        kl_sum += float((s_logp.exp() * (s_logp - t_logp)).sum())
        agree += int((s_logp.argmax(-1) == t_logp.argmax(-1)).sum())
        positions += len(continuation)
    if positions == 0:
        raise ValueError("the held-out contexts have no continuation tokens")
    return {"reverse_kl": kl_sum / positions, "agreement": agree / positions, "positions": float(positions)}
