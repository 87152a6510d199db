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
recomputed by the policy. Teacher log-probs are taken at temperature 1 (the target).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from agentr1.trainer.rows import TrainRow

if TYPE_CHECKING:
    from agentr1.trainer.config import JobConfig
    from agentr1.trainer.policy import LocalPolicy

__all__ = ["Distiller", "LocalTeacher", "SGLangTeacher", "Teacher", "build_distiller", "check_same_tokenizer",
           "reverse_kl_advantages"]

log = logging.getLogger(__name__)


class Teacher(Protocol):
    def logprobs(self, rows: Sequence[TrainRow]) -> list[list[float]]:
        """Per row: the teacher's log-prob of each response token given everything before it."""
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


def reverse_kl_advantages(rows: Sequence[TrainRow], teacher_logprobs: Sequence[Sequence[float]],
                          student_logprobs: Sequence[Sequence[float]], *, coef: float, alone: bool
                          ) -> dict[str, float]:
    """Set (``alone``) or add ``coef * (teacher - student)`` as each action token's advantage;
    tokens outside the response mask keep advantage 0 (or their task advantage). Returns
    ``distill/*`` metrics: the mean single-sample reverse KL and both log-probs over action tokens."""
    if len(teacher_logprobs) != len(rows) or len(student_logprobs) != len(rows):
        raise ValueError(f"{len(teacher_logprobs)} teacher and {len(student_logprobs)} student log-prob rows "
                         f"for {len(rows)} rows")
    kl_sum = t_sum = s_sum = 0.0
    tokens = 0
    for i, (row, teacher, student) in enumerate(zip(rows, teacher_logprobs, student_logprobs, strict=True)):
        n = len(row.response_ids)
        if len(teacher) != n or len(student) != n:
            raise ValueError(f"row {i}: {len(teacher)} teacher / {len(student)} student log-probs for {n} tokens")
        base = [0.0] * n if alone or len(row.advantages) != n else list(row.advantages)
        for k in range(n):
            if row.response_mask[k]:
                kl = student[k] - teacher[k]
                base[k] += -coef * kl
                kl_sum, t_sum, s_sum, tokens = kl_sum + kl, t_sum + teacher[k], s_sum + student[k], tokens + 1
        row.advantages = base
    denom = max(1, tokens)
    return {"distill/reverse_kl": kl_sum / denom, "distill/teacher_logprob": t_sum / denom,
            "distill/student_logprob": s_sum / denom, "distill/tokens": float(tokens)}


class LocalTeacher:
    """A HF teacher in this process, run by the same verl FSDP model code as the policy's own
    log-probs (``VerlModel(role="ref")``: frozen, inference only)."""

    def __init__(self, model_path: str | os.PathLike[str], policy: LocalPolicy) -> None:
        from agentr1.trainer.policy.verl_model import VerlModel

        self.model = VerlModel(Path(model_path), role="ref", config=policy.config, device=policy.device)
        self.pad_id = policy.pad_token_id

    def logprobs(self, rows: Sequence[TrainRow]) -> list[list[float]]:
        from agentr1.trainer.policy.batch import pad_rows

        batch = pad_rows(rows, pad_id=self.pad_id)
        out = self.model.infer(batch, temperature=1.0)["log_probs"]
        return [list(map(float, r)) for r in batch.unpad(out)]


class SGLangTeacher:
    """A teacher served by SGLang: ``POST /generate`` with ``input_ids`` = prompt + response,
    ``max_new_tokens`` 0 (prefill only), ``return_logprob`` and ``logprob_start_len`` = the prompt
    length; ``meta_info.input_token_logprobs`` then holds ``[logprob, token_id, text]`` for each
    response token. The returned ids are checked against the sent ones."""

    def __init__(self, url: str, *, timeout_s: float = 300.0, client: httpx.Client | None = None) -> None:
        self.url = url.rstrip("/")
        self.client = client or httpx.Client(timeout=timeout_s)

    def logprobs(self, rows: Sequence[TrainRow]) -> list[list[float]]:
        return [self._score(row) for row in rows]

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
    """Turns a batch's rows into OPD advantages (see the module docstring)."""

    def __init__(self, teacher: Teacher, *, coef: float, alone: bool,
                 student_logprobs: Callable[[Sequence[TrainRow]], list[list[float]]]) -> None:
        self.teacher, self.coef, self.alone = teacher, coef, alone
        self._recompute = student_logprobs

    def apply(self, rows: Sequence[TrainRow]) -> dict[str, float]:
        teacher = self.teacher.logprobs(rows)
        student: list[list[float]] = [list(r.old_logprobs) for r in rows]
        missing = [i for i, r in enumerate(rows) if not r.has_old_logprobs]
        if missing:  # a step came without rollout log-probs: the current policy's stand in
            for i, lp in zip(missing, self._recompute([rows[i] for i in missing]), strict=True):
                student[i] = lp
        return reverse_kl_advantages(rows, teacher, student, coef=self.coef, alone=self.alone)


def build_distiller(cfg: JobConfig, student_path: Path, policy: LocalPolicy) -> Distiller:
    """The distiller ``algorithm.distill`` describes, after checking the shared tokenizer."""
    from agentr1.core import resolve_model

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
                     student_logprobs=lambda rows: policy.compute_logprobs(rows, temperature=temperature))
