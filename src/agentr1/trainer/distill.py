"""On-policy distillation (OPD): a teacher scores the student's own sampled tokens.

The student samples (through the gateway, as in any rollout); the teacher computes the
log-probability of exactly those tokens given exactly the same context. Per action token,
``log p_student(a_t) - log p_teacher(a_t)`` is the single-sample estimate of the reverse KL
``KL(student || teacher)`` at that position; its negative is the token's advantage, so the policy
loss raises sampled tokens the teacher likes more than the student does and lowers the others.
Reverse KL is mode-seeking and needs no teacher sampling: the student learns on its own
distribution of states, which is what makes the distillation on-policy.

``algorithm.distill.alone``: the distillation advantage replaces the task advantages (pure OPD);
otherwise it is added to them with weight ``coef`` (task reward plus a dense teacher signal).

Teachers: :class:`LocalTeacher` (a HF model held by verl's FSDP engine code, the forward the
policy uses for its own log-probs) and :class:`SGLangTeacher` (a remote SGLang server's
prefill-only scoring of given tokens). The student's log-probs are the rollout log-probs the
gateway recorded (the distribution the tokens were sampled from); rows without them are
recomputed by the policy. Teacher log-probs are taken at temperature 1 (the target). Everything here reads and
writes the batch's tensors (:class:`~agentr1.trainer.padded.PaddedBatch`): the advantages the update reads.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx
import torch

from agentr1.core import resolve_model
from agentr1.trainer.padded import PaddedBatch
from agentr1.trainer.rows import TrainRow

if TYPE_CHECKING:
    from agentr1.trainer.config import JobConfig
    from agentr1.trainer.policy import LocalPolicy

__all__ = ["Distiller", "LocalTeacher", "SGLangTeacher", "Teacher", "build_distiller", "check_same_tokenizer",
           "reverse_kl_advantages"]

log = logging.getLogger(__name__)


class Teacher(Protocol):
    def logprobs(self, batch: PaddedBatch) -> torch.Tensor:
        """(B, R): the teacher's log-prob of each response token given everything before it."""
        ...


def check_same_tokenizer(student: str | os.PathLike[str], teacher: str | os.PathLike[str]) -> None:
    """Token-level distillation compares log-probs of the same token ids: both models must map
    text to ids identically. Raises ValueError naming the first difference."""
    from transformers import AutoTokenizer

    s_tok, t_tok = AutoTokenizer.from_pretrained(student), AutoTokenizer.from_pretrained(teacher)
    s_vocab, t_vocab = s_tok.get_vocab(), t_tok.get_vocab()
    if s_vocab != t_vocab:
        only_s = sorted(set(s_vocab.items()) - set(t_vocab.items()))[:3]
        only_t = sorted(set(t_vocab.items()) - set(s_vocab.items()))[:3]
        raise ValueError(f"student ({student}) and teacher ({teacher}) tokenizers differ: {len(s_vocab)} vs "
                         f"{len(t_vocab)} tokens; only the student's: {only_s}; only the teacher's: {only_t}. "
                         "On-policy distillation needs a shared tokenizer.")
    for name in ("eos_token", "bos_token", "pad_token"):
        if getattr(s_tok, name) != getattr(t_tok, name):
            raise ValueError(f"student and teacher tokenizers differ in {name}: {getattr(s_tok, name)!r} vs "
                             f"{getattr(t_tok, name)!r}")


def reverse_kl_advantages(batch: PaddedBatch, teacher_logprobs: torch.Tensor, student_logprobs: torch.Tensor, *,
                          coef: float, alone: bool) -> dict[str, float]:
    """Set (``alone``) or add ``coef * (teacher - student)`` as each action token's advantage in
    ``batch.extra["advantages"]``; tokens outside the response mask keep advantage 0 (or their task advantage).
    Returns ``distill/*`` metrics: the mean single-sample reverse KL and both log-probs over action tokens."""
    shape = tuple(batch.response_mask.shape)
    if tuple(teacher_logprobs.shape) != shape or tuple(student_logprobs.shape) != shape:
        raise ValueError(f"teacher log-probs {tuple(teacher_logprobs.shape)} and student "
                         f"{tuple(student_logprobs.shape)} for a batch of {shape} response tokens")
    action = batch.response_mask != 0
    teacher, student = teacher_logprobs.double(), student_logprobs.double()
    kl = student - teacher
    base = batch.extra.get("advantages")
    if alone or base is None:
        base = torch.zeros(shape, dtype=torch.float64)
    batch.extra["advantages"] = torch.where(action, base + (-coef) * kl, base)
    tokens = int(action.sum())
    denom = max(1, tokens)
    # summed one by one in row order (as floats, not by torch): the metrics do not depend on how torch reduces
    return {"distill/reverse_kl": sum(kl[action].tolist()) / denom,
            "distill/teacher_logprob": sum(teacher[action].tolist()) / denom,
            "distill/student_logprob": sum(student[action].tolist()) / denom, "distill/tokens": float(tokens)}


class LocalTeacher:
    """A HF teacher in this process, run by the same verl FSDP model code as the policy's own
    log-probs (``VerlModel(role="ref")``: frozen, inference only)."""

    def __init__(self, model_path: str | os.PathLike[str], policy: LocalPolicy) -> None:
        from agentr1.trainer.policy.verl_model import VerlModel

        self.model = VerlModel(Path(model_path), role="ref", config=policy.config, device=policy.device)

    def logprobs(self, batch: PaddedBatch) -> torch.Tensor:
        return self.model.infer(batch, temperature=1.0)["log_probs"]


class SGLangTeacher:
    """A teacher served by SGLang: ``POST /generate`` with ``input_ids`` = prompt + response,
    ``max_new_tokens`` 0 (prefill only), ``return_logprob`` and ``logprob_start_len`` = the prompt
    length; ``meta_info.input_token_logprobs`` then holds ``[logprob, token_id, text]`` for each
    response token. The returned ids are checked against the sent ones."""

    def __init__(self, url: str, *, timeout_s: float = 300.0, client: httpx.Client | None = None) -> None:
        self.url = url.rstrip("/")
        self.client = client or httpx.Client(timeout=timeout_s)

    def logprobs(self, batch: PaddedBatch) -> torch.Tensor:
        return batch.response_tensor([self._score(row) for row in batch.rows], torch.float64)

    def _score(self, row: TrainRow) -> list[float]:
        body = {"input_ids": list(row.prompt_ids) + list(row.response_ids), "return_logprob": True,
                "logprob_start_len": len(row.prompt_ids),
                "sampling_params": {"max_new_tokens": 0, "temperature": 1.0}}
        response = self.client.post(f"{self.url}/generate", json=body)
        if response.status_code != 200:
            raise RuntimeError(f"SGLang teacher at {self.url} answered {response.status_code}: {response.text[:300]}")
        entries = response.json().get("meta_info", {}).get("input_token_logprobs") or []
        entries = entries[-len(row.response_ids):] if row.response_ids else []
        ids = [int(e[1]) for e in entries]
        if ids != list(row.response_ids) or any(e[0] is None for e in entries):
            raise RuntimeError(f"SGLang teacher at {self.url} scored tokens {ids[:8]}... for response "
                               f"{list(row.response_ids)[:8]}... (or left log-probs empty): is the server "
                               "running the same tokenizer, and a version with prefill-only scoring?")
        return [float(e[0]) for e in entries]

    def close(self) -> None:
        self.client.close()


class Distiller:
    """Turns a batch into OPD advantages (see the module docstring)."""

    def __init__(self, teacher: Teacher, *, coef: float, alone: bool,
                 student_logprobs: Callable[[PaddedBatch], torch.Tensor]) -> None:
        self.teacher, self.coef, self.alone = teacher, coef, alone
        self._recompute = student_logprobs

    def apply(self, batch: PaddedBatch) -> dict[str, float]:
        teacher = self.teacher.logprobs(batch)
        student = batch.extra["rollout_log_probs"].double()
        missing = (~batch.has_rollout_log_probs).nonzero().flatten().tolist()
        if missing:  # a step came without rollout log-probs: the current policy's stand in
            student = student.clone()
            student[missing] = self._recompute(batch.select(missing)).double()
        return reverse_kl_advantages(batch, teacher, student, coef=self.coef, alone=self.alone)


def build_distiller(cfg: JobConfig, student_path: Path, policy: LocalPolicy) -> Distiller:
    """The distiller ``algorithm.distill`` describes, after checking the shared tokenizer."""

    spec = cfg.algorithm.distill
    assert spec is not None
    teacher_path = resolve_model(spec.teacher)
    check_same_tokenizer(student_path, teacher_path)
    teacher: Any = (LocalTeacher(teacher_path, policy) if spec.backend == "local"
                    else SGLangTeacher(spec.url or ""))
    log.info("on-policy distillation from %s (%s), coef %.3g, %s", spec.teacher, spec.backend, spec.coef,
             "alone" if spec.alone else "added to task advantages")
    temperature = cfg.actor_rollout_ref.rollout.temperature
    return Distiller(teacher, coef=spec.coef, alone=spec.alone,
                     student_logprobs=lambda batch: policy.log_probs(batch, temperature=temperature))
