"""The policy on verl's real code path (FSDP2 engine, ppo_loss, value_loss) on CPU.

The model is the tiny random Llama of tests/conftest.py; references are plain PyTorch / transformers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from policy_fixtures import (
    load_plain_model,
    make_row,
    plain_logprobs,
    plain_vanilla_ppo_loss,
    run,
)

from agentr1.trainer.policy import LocalPolicy, PolicyConfig


def make_policy(path: Path, **overrides: object) -> LocalPolicy:
    return LocalPolicy(path, device="cpu", **overrides)


def ragged_rows() -> list:
    return [
        make_row([1, 2, 3, 4], [50, 51, 52, 53, 54], advantage=1.0),
        make_row([7], [60, 61, 62, 63, 64, 65, 66, 67], mask=[1, 1, 0, 0, 0, 1, 1, 1], advantage=-0.5),
        make_row([9, 10, 11, 12, 13, 14], [70, 71], advantage=[2.0, -1.0]),
    ]


def test_update_matches_plain_pytorch_ppo_loss_and_gradient(tiny_model_path):
    # SGD makes the step linear in the (clipped) gradient, so the weights compare the gradients;
    # a 12-token budget puts each row (8-9 tokens) in its own micro-batch: gradient accumulation
    lr = 0.1
    policy = make_policy(tiny_model_path, lr=lr, optimizer="SGD", weight_decay=0.0, ppo_max_token_len_per_gpu=12)
    plain = load_plain_model(tiny_model_path)
    rows = ragged_rows()
    before = policy.state_dict_for_serving()

    # old log-probs recomputed by the actor = a plain forward of each row alone
    plain_lp = plain_logprobs(plain, rows)
    ours = policy.compute_logprobs(rows)
    for row, lp, got in zip(rows, plain_lp, ours, strict=True):
        want = lp.detach() * torch.tensor(row.response_mask)
        assert torch.allclose(torch.tensor(got), want, atol=1e-5)

    # first step: ratio = 1, so pg_loss = -token-mean(advantages)
    metrics = policy.update(rows)
    loss, fractions = plain_vanilla_ppo_loss(plain_lp, [lp.detach() for lp in plain_lp], rows)
    assert metrics["actor/pg_loss"] == pytest.approx(loss.item(), abs=1e-5)
    assert metrics["actor/pg_clipfrac"] == sum(fractions) == 0.0
    assert metrics["actor/optimizer_steps"] == 1 and metrics["actor/action_tokens"] == 12

    params = list(plain.parameters())
    optimizer = torch.optim.SGD(params, lr=lr)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm=1.0)
    assert metrics["actor/grad_norm"] == pytest.approx(float(grad_norm), rel=1e-5)
    optimizer.step()
    optimizer.zero_grad()

    after = policy.state_dict_for_serving()
    reference = plain.state_dict()
    assert set(after) == set(reference)
    for name, value in after.items():
        assert not torch.equal(value, before[name]), f"{name} did not move"
        assert torch.allclose(value, reference[name], atol=1e-6), name

    # second step with the caller's old log-probs: ratio != 1, clipping in play
    with torch.no_grad():
        current = plain_logprobs(plain, rows)
    shifts = [torch.linspace(-0.4, 0.4, len(r.response_ids)) for r in rows]
    old = [(lp + s) * torch.tensor(r.response_mask) for lp, s, r in zip(current, shifts, rows, strict=True)]
    metrics = policy.update(rows, old_log_probs=[o.tolist() for o in old])
    loss, fractions = plain_vanilla_ppo_loss(current, old, rows)
    assert metrics["actor/pg_loss"] == pytest.approx(loss.item(), abs=1e-5)
    # verl averages the micro-batches' clip fractions; here each row is one micro-batch
    assert metrics["actor/pg_clipfrac"] == pytest.approx(sum(fractions) / len(fractions), abs=1e-5)
    assert sum(fractions) > 0


def test_positive_advantages_raise_logprobs_and_negative_lower_them(tiny_model_path):
    policy = make_policy(tiny_model_path, lr=1e-3, loss_mode="vanilla", ppo_epochs=2, ppo_mini_batch_size=1)
    up = make_row([5, 6, 7], [100, 101, 102], advantage=1.0)
    down = make_row([8, 9], [200, 201], advantage=-1.0)
    start = policy.compute_logprobs([up, down])
    for _ in range(2):
        metrics = policy.update([up, down])
        assert metrics["actor/optimizer_steps"] == 4  # 2 epochs x 2 mini-batches
    end = policy.compute_logprobs([up, down])
    assert sum(end[0]) > sum(start[0]) + 0.5
    assert sum(end[1]) < sum(start[1]) - 0.5
    assert policy.version == 2


def test_bypass_mode_takes_the_rollout_logprobs_as_old_logprobs(tiny_model_path):
    policy = make_policy(tiny_model_path, lr=1e-3, bypass_mode=True)
    rows = ragged_rows()
    for row, lp in zip(rows, policy.compute_logprobs(rows), strict=True):
        row.old_logprobs = [x + 1.0 if m else 0.0 for x, m in zip(lp, row.response_mask, strict=True)]
    metrics = policy.update(rows)
    # ppo_kl = mean(old - current) over action tokens: exactly the shift put into the rollout log-probs
    assert metrics["actor/ppo_kl"] == pytest.approx(1.0, abs=1e-5)
    assert "actor/entropy" not in metrics and not any(k.startswith("rollout_corr/") for k in metrics)


def test_kl_to_reference_is_zero_before_and_positive_after_an_update(tiny_model_path):
    policy = make_policy(tiny_model_path, lr=1e-2, use_kl_loss=True, kl_loss_coef=0.1, kl_loss_type="low_var_kl")
    rows = ragged_rows()
    assert policy.kl_to_reference(rows) == pytest.approx(0.0, abs=1e-7)
    assert policy.compute_ref_logprobs(rows) == policy.compute_logprobs(rows)
    first = policy.update(rows)
    assert first["actor/kl_loss"] == pytest.approx(0.0, abs=1e-7)
    assert policy.kl_to_reference(rows) > 1e-4
    second = policy.update(rows)
    assert second["actor/kl_loss"] > 1e-4
    assert second["actor/loss"] == pytest.approx(second["actor/pg_loss"] + 0.1 * second["actor/kl_loss"], abs=1e-5)


def test_sync_to_backend_changes_greedy_output_and_saved_model_serves_the_same(tiny_model_path, tmp_path):
    from agentr1.core.generation import GenerateRequest, SamplingParams
    from agentr1.engine import EngineOptions
    from agentr1.gateway.backends import LocalBackend

    greedy = SamplingParams(max_new_tokens=4, temperature=0.0)
    prompt = [1, 30, 31, 32, 33]

    async def scenario() -> None:
        live = LocalBackend(tiny_model_path, EngineOptions(device="cpu"))
        await live.start()
        try:
            before = await live.generate(GenerateRequest(prompt, greedy))
            target = next(t for t in range(300, 400) if t not in before.output_ids)
            policy = make_policy(tiny_model_path, lr=3e-2)
            row = make_row(prompt, [target], advantage=1.0)
            for _ in range(6):
                policy.update([row])
                if math.exp(policy.compute_logprobs([row])[0][0]) > 0.6:
                    break
            assert await policy.sync_to(live) == 1 == live.policy_version
            after = await live.generate(GenerateRequest(prompt, greedy))
            assert after.output_ids[0] == target != before.output_ids[0]
            assert after.policy_version == 1

            # the saved directory serves the same policy: same ids, same log-probs
            saved = policy.save(tmp_path / "policy")
            assert (saved / "model.safetensors").is_file() and (saved / "tokenizer.json").is_file()
            served = LocalBackend(saved, EngineOptions(device="cpu"))
            await served.start()
            try:
                again = await served.generate(GenerateRequest(prompt, greedy))
            finally:
                await served.close()
            assert again.output_ids == after.output_ids
            assert again.logprobs == pytest.approx(after.logprobs, abs=1e-5)
            ours = policy.compute_logprobs([make_row(prompt, after.output_ids)])[0]
            assert ours == pytest.approx(after.logprobs, abs=1e-4)
        finally:
            await live.close()

    run(scenario())


def test_ragged_rows_and_all_zero_masks_stay_finite(tiny_model_path):
    policy = make_policy(
        tiny_model_path, lr=1e-3, loss_mode="cispo", entropy_coeff=0.01, ppo_mini_batch_size=2, rollout_is="token"
    )
    no_rollout_logprobs = make_row([2], [90, 91], advantage=0.5, rollout_logprob=0.0)
    no_rollout_logprobs.has_old_logprobs = False  # taken as on-policy: IS weight 1
    rows = [*ragged_rows(), make_row([3, 4], [80, 81, 82], mask=[0, 0, 0]), no_rollout_logprobs]
    metrics = policy.update(rows, temperature=0.7)
    assert metrics["actor/optimizer_steps"] == 3
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(1.0, abs=1e-6)  # the on-policy row
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert all(math.isfinite(x) for lp in policy.compute_logprobs(rows) for x in lp)

    # nothing to learn: no step, no NaN, weights untouched
    silent = [make_row([3, 4], [80, 81, 82], mask=[0, 0, 0]), make_row([5], [6], mask=[0])]
    before = policy.state_dict_for_serving()
    metrics = policy.update(silent)
    assert metrics["actor/optimizer_steps"] == 0 and metrics["actor/skipped_mini_batches"] == 1
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    after = policy.state_dict_for_serving()
    assert all(torch.equal(after[k], before[k]) for k in before)


def test_critic_fits_returns_and_checkpoints_restore_optimizer_state(tiny_model_path, tmp_path):
    policy = make_policy(
        tiny_model_path, lr=1e-3, critic=True, critic_lr=1e-3, ppo_micro_batch_size_per_gpu=1, calculate_entropy=False
    )
    rows = ragged_rows()
    values = policy.compute_values(rows)
    assert [len(v) for v in values] == [len(r.response_ids) for r in rows]
    losses = [policy.update_critic(rows)["critic/vf_loss"] for _ in range(2)]
    assert losses[1] < losses[0]
    policy.update(rows)

    policy.save_checkpoint(tmp_path / "ckpt")
    saved_values = policy.compute_values(rows)
    first = policy.update(rows), policy.update_critic(rows)
    stepped = policy.state_dict_for_serving()
    policy.load_checkpoint(tmp_path / "ckpt")
    assert policy.version == 1 and policy.critic_version == 2
    assert policy.compute_values(rows) == saved_values
    # the optimizer state came back with the weights: the same step again gives the same weights
    again = policy.update(rows), policy.update_critic(rows)
    assert again[0]["actor/pg_loss"] == pytest.approx(first[0]["actor/pg_loss"], abs=1e-7)
    assert again[1]["critic/vf_loss"] == pytest.approx(first[1]["critic/vf_loss"], abs=1e-7)
    restepped = policy.state_dict_for_serving()
    assert all(torch.allclose(stepped[k], restepped[k], atol=1e-7) for k in stepped)


def test_config_names_come_from_verl_registries():
    with pytest.raises(ValueError, match=r"vanilla.*") as info:
        PolicyConfig(loss_mode="nope").validate()
    assert "gspo" in str(info.value) and "cispo" in str(info.value)
    with pytest.raises(ValueError, match="kl_loss_type"):
        PolicyConfig(kl_loss_type="k9").validate()
    with pytest.raises(ValueError, match="loss_agg_mode"):
        PolicyConfig(loss_agg_mode="mean").validate()
    with pytest.raises(ValueError, match="unknown policy settings"):
        PolicyConfig.from_dict({"learning_rate": 1.0})
    for name in ("gspo", "cispo", "clip_cov", "kl_cov", "geo_mean", "sapo"):
        PolicyConfig(loss_mode=name).validate()
    assert PolicyConfig.from_dict({"lr": 2e-6, "betas": [0.9, 0.95]}).betas == (0.9, 0.95)


def test_bf16_compute_updates_like_float32_within_rounding_and_keeps_float32_weights(tiny_model_path):
    """``actor.param_dtype: bf16`` (verl's mixed precision; the laptop demo's setting on a CPU with bfloat16
    matrix products): the job's setting reaches the policy, log-probs and the loss carry bfloat16's rounding, and
    the weights the serving engine receives stay float32."""
    from agentr1.trainer.config import JobConfig
    from agentr1.trainer.loop import policy_config

    job = JobConfig.model_validate({"agent": {"entrypoint": "m:f"},
                                    "actor_rollout_ref": {"actor": {"param_dtype": "bf16"}}})
    assert policy_config(job).param_dtype == "bf16"
    assert policy_config(JobConfig.model_validate({"agent": {"entrypoint": "m:f"}})).param_dtype == "auto"
    rows = ragged_rows()
    full, half = make_policy(tiny_model_path, lr=1e-3), make_policy(tiny_model_path, lr=1e-3, param_dtype="bf16")
    differences = [abs(a - b) for want, got in zip(full.compute_logprobs(rows), half.compute_logprobs(rows), strict=True)
                   for a, b in zip(want, got, strict=True)]
    assert 1e-5 < max(differences) < 0.1  # bfloat16's rounding: not float32's bits, not another model
    losses = [e.update(rows)["actor/pg_loss"] for e in (full, half)]
    assert losses[1] == pytest.approx(losses[0], abs=0.05)
    assert {t.dtype for t in half.state_dict_for_serving().values()} == {torch.float32}
