"""On-policy distillation: the reverse-KL advantage on known log-probs, the shared-tokenizer check,
the SGLang teacher's protocol, the held-out measure, and a real run of the ``examples/distill``
recipe (noise-perturbed SmolLM2 student, SmolLM2 teacher) that brings the student closer to the
teacher on held-out prompts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from examples.distill.run_opd import run_opd
from examples.distill.tasks import HELD_OUT

from agentr1.trainer.distill import Distiller, check_same_tokenizer, reverse_kl_advantages
from agentr1.trainer.distill_eval import HeldOutAgreement
from agentr1.trainer.padded import pad_rows
from agentr1.trainer.rows import TrainRow

OPD_TEST_SETTING = {"noise": 0.1, "steps": 2, "batch": 8, "n": 1, "lr": 5e-5, "max_tokens": 16,
                    "held_out_tokens": 16, "seed": 0, "seeded": True}
# held-out reverse KL after / before. Unseeded (4 tasks x 2 samples a step) it was 0.81, 0.85, 0.93, 0.92
# and once 1.04 (1.045 -> 1.088: a CI failure on 2026-12-02); every task is now sampled under its own seed
# (8 tasks x 1 sample), so a run is one draw: 1.045 -> 1.026 -> 0.967 (0.925), the same in two runs here.
# The test asks for a clear decrease of at least 2%: a wrong sign of the distillation advantage
# raises the KL instead (the student is pushed away from the teacher).
OPD_TEST_KL_RATIO = 0.98


# -- unit ------------------------------------------------------------------------------------------


def _row(mask: list[int], advantages: list[float] | None = None) -> TrainRow:
    n = len(mask)
    return TrainRow(prompt_ids=[1, 2], response_ids=list(range(10, 10 + n)), response_mask=mask,
                    old_logprobs=[-1.0 if m else 0.0 for m in mask], token_rewards=[0.0] * n, segments=[],
                    session_id="s", group_id="g", advantages=advantages or [])


def test_reverse_kl_advantage_is_teacher_minus_student_on_sampled_tokens():
    batch = pad_rows([_row([1, 1, 0, 1])])
    metrics = reverse_kl_advantages(batch, torch.tensor([[-0.5, -3.0, -9.0, -1.0]]),
                                    torch.tensor([[-1.0, -1.0, 0.0, -1.0]]), coef=2.0, alone=True)
    # 2 * (teacher - student); feedback token untouched
    assert batch.extra["advantages"].tolist() == [[1.0, -4.0, 0.0, 0.0]]
    assert metrics["distill/reverse_kl"] == pytest.approx((-0.5 + 2.0 + 0.0) / 3)
    assert metrics["distill/tokens"] == 3.0


def test_reverse_kl_advantage_adds_to_task_advantages():
    batch = pad_rows([_row([1, 0, 1], advantages=[0.5, 0.0, 0.5])])
    reverse_kl_advantages(batch, torch.tensor([[-2.0, -7.0, -1.0]]), torch.tensor([[-1.0, 0.0, -1.0]]), coef=0.1,
                          alone=False)
    assert batch.extra["advantages"][0].tolist() == pytest.approx([0.4, 0.0, 0.5])


def test_reverse_kl_advantage_rejects_misaligned_log_probs():
    with pytest.raises(ValueError, match=r"teacher log-probs \(1, 1\) .* for a batch of \(1, 2\)"):
        reverse_kl_advantages(pad_rows([_row([1, 1])]), torch.tensor([[-1.0]]), torch.tensor([[-1.0, -1.0]]),
                              coef=1.0, alone=True)


def test_distiller_recomputes_missing_student_log_probs():
    class Teacher:
        def logprobs(self, batch):
            return torch.full(batch.response_mask.shape, -2.0)

    row, recorded = _row([1, 1]), _row([1, 1])
    row.has_old_logprobs = False
    asked = []
    distiller = Distiller(Teacher(), coef=1.0, alone=True,
                          student_logprobs=lambda batch: asked.append(len(batch)) or torch.full((1, 2), -0.5))
    batch = pad_rows([recorded, row])
    distiller.apply(batch)
    # the recorded row's student log-probs are its rollout's (-1.0), the other's the policy's
    assert asked == [1] and batch.extra["advantages"].tolist() == [[-1.0, -1.0], [-1.5, -1.5]]


def test_tokenizer_mismatch_is_a_clear_error(tmp_path, tiny_model_path):
    from transformers import AutoTokenizer

    other = tmp_path / "other"
    shutil.copytree(tiny_model_path, other)
    tokenizer = AutoTokenizer.from_pretrained(other)
    tokenizer.add_tokens(["<new_tool_token>"])
    tokenizer.save_pretrained(other)
    check_same_tokenizer(tiny_model_path, tiny_model_path)
    with pytest.raises(ValueError, match=r"tokenizers differ.*<new_tool_token>"):
        check_same_tokenizer(tiny_model_path, other)


# -- the teachers against plain transformers -------------------------------------------------------


def scoring_sglang_app(model_path: Path):
    """A fake SGLang server for the one request :class:`SGLangTeacher` sends (SGLang itself needs a
    CUDA build that cannot run here): ``POST /generate`` with ``input_ids``, ``sampling_params``
    ``{max_new_tokens: 0, ...}``, ``return_logprob`` and ``logprob_start_len`` k answers, as SGLang
    0.5 does, ``{output_ids: [], meta_info: {input_token_logprobs: [[logprob, token_id, null], ...]}}``
    for positions k..end, each the log-prob of that token given the tokens before it (null at
    position 0, which has no context). Log-probs from the real model (transformers, float32)."""
    from fastapi import FastAPI
    from policy_fixtures import load_plain_model

    model = load_plain_model(model_path)
    app = FastAPI()

    @app.get("/health")
    def health() -> dict:
        return {}

    @app.post("/generate")
    def generate(body: dict) -> dict:
        ids, start = body["input_ids"], int(body["logprob_start_len"])
        with torch.inference_mode():
            logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)
        entries = [[None if i == 0 else float(logp[i - 1, ids[i]]), ids[i], None] for i in range(start, len(ids))]
        return {"output_ids": [], "meta_info": {"input_token_logprobs": entries, "completion_tokens": 0}}

    return app


@pytest.mark.slow
def test_local_and_sglang_teachers_score_the_exact_tokens(tiny_model_path):
    from policy_fixtures import load_plain_model, plain_logprobs

    from agentr1.gateway.server import BackgroundServer
    from agentr1.trainer.distill import LocalTeacher, SGLangTeacher
    from agentr1.trainer.policy import LocalPolicy

    rows = [_row([1, 1, 1]), _row([1, 0, 1, 1, 1])]
    rows[1].prompt_ids = [5, 6, 7, 8]
    expected = [t.tolist() for t in plain_logprobs(load_plain_model(tiny_model_path), rows)]
    local = LocalTeacher(tiny_model_path, LocalPolicy(tiny_model_path, device="cpu"))
    with BackgroundServer(scoring_sglang_app(tiny_model_path), ready_path="/health", startup_timeout_s=30) as url:
        remote = SGLangTeacher(url)
        batch = pad_rows(rows)
        for teacher in (local, remote):
            got = batch.unpad(teacher.logprobs(batch))
            for g, e in zip(got, expected, strict=True):
                assert g == pytest.approx(e, abs=1e-4)
        bad = _row([1, 1])
        bad.response_ids = [10**6, 3]  # the server cannot score ids outside its vocabulary
        with pytest.raises(RuntimeError, match="SGLang teacher"):
            remote.logprobs(pad_rows([bad]))
        remote.close()


# -- the run ---------------------------------------------------------------------------------------


def test_held_out_agreement_of_the_teacher_with_itself_is_exact(tiny_model_path):
    reference = HeldOutAgreement(tiny_model_path, HELD_OUT[:2], max_new_tokens=4)
    same = reference.measure(tiny_model_path)
    assert same["agreement"] == 1.0 and abs(same["reverse_kl"]) < 1e-5 and same["positions"] == 8.0
    with pytest.raises(ValueError, match="held-out questions"):
        HeldOutAgreement(tiny_model_path, [], max_new_tokens=4)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_opd_brings_the_student_closer_to_the_teacher_on_held_out_prompts(tmp_path, smollm2_path):
    # SmolLM2 teacher, the same model with noise as the student (a random tiny student almost never
    # samples what the teacher likes: held-out KL did not move). The recipe through the real
    # trainer: gateway, agent, store, algorithm.distill alone, verl updates, weight sync.
    result = run_opd(tmp_path, teacher=str(smollm2_path), **OPD_TEST_SETTING)
    before, after = result["held_out"][0], result["held_out"][-1]
    print(f"held-out reverse KL {[round(h['reverse_kl'], 3) for h in result['held_out']]}, agreement "
          f"{[round(h['agreement'], 3) for h in result['held_out']]}, train {result['train']}, "
          f"{result['total_s']:.0f} s")
    assert all(t["distill/tokens"] > 0 for t in result["train"])
    assert after["reverse_kl"] < OPD_TEST_KL_RATIO * before["reverse_kl"]  # see OPD_TEST_KL_RATIO


def test_seeded_opd_tasks_carry_a_seed_each_and_refuse_several_samples(tmp_path):
    from examples.distill.tasks import make_tasks

    seeds = [t["sampling_seed"] for t in make_tasks("train", 32, 3, seeded=True)]
    assert len(set(seeds)) == 32 and seeds != [t["sampling_seed"] for t in make_tasks("train", 32, 4, seeded=True)]
    assert all("sampling_seed" not in t for t in make_tasks("train", 4, 3))
    with pytest.raises(ValueError, match="use n=1"):
        run_opd(tmp_path, n=2, seeded=True)
