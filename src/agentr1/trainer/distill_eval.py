"""How close a student is to its teacher on held-out prompts (the measure of on-policy distillation).

The contexts are fixed: each held-out chat prompt followed by the teacher's greedy continuation,
built once, so measurements before, during and after training compare the same positions. The
teacher's next-token distributions there are computed once too. At every continuation position
the student's full next-token distribution is compared with the teacher's:

- ``reverse_kl``: exact ``KL(student || teacher)`` over the vocabulary, mean over positions (the
  quantity OPD's per-token signal estimates with one sample);
- ``agreement``: how often the student's greedy token equals the teacher's;
- ``teacher_top_prob``: the student's mean probability of the teacher's greedy token (agreement
  without the argmax's all-or-nothing: it moves before a token's rank flips).

:func:`perturbed_student` makes the student of the measured runs: the teacher with seeded noise
on its weight matrices. It samples near the teacher's modes but disagrees with it, as a smaller
or less trained student of the same family does; a random model almost never samples what the
teacher likes, which leaves the single-sample OPD signal nothing to reinforce.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

__all__ = ["HeldOutAgreement", "perturbed_student"]


def _load(path: str | os.PathLike[str]) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(Path(path), dtype=torch.float32, attn_implementation="sdpa").eval()


class HeldOutAgreement:
    """The teacher's greedy continuations of ``questions`` and its distributions along them;
    :meth:`measure` scores a student (a HF directory or a loaded causal LM) against them."""

    @torch.inference_mode()
    def __init__(self, teacher: str | os.PathLike[str], questions: list[str], *, max_new_tokens: int = 24) -> None:
        from transformers import AutoTokenizer

        if not questions or max_new_tokens < 1:
            raise ValueError(f"need held-out questions and max_new_tokens >= 1 (got {len(questions)} questions, "
                             f"max_new_tokens={max_new_tokens})")
        tokenizer = AutoTokenizer.from_pretrained(teacher)
        model = _load(teacher)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        prompts = []
        for question in questions:
            ids = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                                tokenize=True, return_dict=False)
            prompts.append(list(ids["input_ids"] if isinstance(ids, dict) else ids))
        # one left-padded greedy batch (a CPU generates one token of 8 prompts about as fast as of one)
        width = max(map(len, prompts))
        batch = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        out = model.generate(batch, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=pad)[:, width:].tolist()
        self.contexts: list[tuple[list[int], int]] = []  # (prompt + continuation ids, prompt length)
        for prompt, continuation in zip(prompts, out, strict=True):
            if tokenizer.eos_token_id in continuation:  # the turn ended: what follows is padding
                continuation = continuation[:continuation.index(tokenizer.eos_token_id) + 1]
            self.contexts.append((prompt + continuation, len(prompt)))
        self.positions = sum(len(ids) - n for ids, n in self.contexts)
        self.pad_id = pad
        self.teacher_logp = self._next_token_logp(model)  # [positions, vocab]

    def _next_token_logp(self, model: torch.nn.Module) -> torch.Tensor:
        """Log-probs at the positions predicting each continuation token, all contexts in one forward:
        right padding leaves a causal model's earlier positions untouched, so no mask is needed."""
        width = max(len(ids) for ids, _ in self.contexts)
        batch = torch.tensor([ids + [self.pad_id] * (width - len(ids)) for ids, _ in self.contexts], device=model.device)
        logits = model(input_ids=batch).logits
        rows = [logits[i, n - 1:len(ids) - 1] for i, (ids, n) in enumerate(self.contexts)]
        return torch.log_softmax(torch.cat(rows).float().cpu(), dim=-1)

    @torch.inference_mode()
    def measure(self, student: str | os.PathLike[str] | torch.nn.Module) -> dict[str, float]:
        """``reverse_kl`` and ``agreement`` of ``student`` with the teacher (see the module doc)."""
        s_logp = self._next_token_logp(student if isinstance(student, torch.nn.Module) else _load(student))
        kl = float((s_logp.exp() * (s_logp - self.teacher_logp)).sum(-1).mean())
        teacher_top = self.teacher_logp.argmax(-1)
        agreement = float((s_logp.argmax(-1) == teacher_top).float().mean())
        top_prob = float(s_logp.gather(-1, teacher_top[:, None]).exp().mean())
        return {"reverse_kl": kl, "agreement": agreement, "teacher_top_prob": top_prob,
                "positions": float(self.positions)}


def perturbed_student(teacher: str | os.PathLike[str], out: str | os.PathLike[str], *, noise: float,
                      seed: int = 0) -> Path:
    """Save ``teacher`` with seeded Gaussian noise (``noise`` x each weight matrix's std) added to
    every weight matrix, to ``out`` (tokenizer and configs copied): a student for OPD runs."""
    from transformers import AutoModelForCausalLM

    if noise <= 0:
        raise ValueError(f"noise must be > 0 (got {noise})")
    out = Path(out)
    shutil.copytree(teacher, out)
    model = AutoModelForCausalLM.from_pretrained(teacher, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in model.parameters():
            if tensor.dim() == 2:
                tensor.add_(torch.randn(tensor.shape, generator=generator) * tensor.std() * noise)
    model.save_pretrained(out)
    return out
