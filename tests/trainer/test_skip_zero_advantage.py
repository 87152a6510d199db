"""``actor.skip_zero_advantage``: rows whose advantages are all zero stay out of the policy update
(they carry no gradient without a KL loss or an entropy bonus), through `agentr1 train` on the tiny model;
with ``algorithm.rollout_correction.bypass_mode`` the update takes the serving engine's log-probs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from test_estimators_train import RECIPES, cpu_overrides, train

from agentr1.trainer.config import ActorConfig


def test_the_option_refuses_losses_whose_gradient_does_not_vanish_with_the_advantage():
    assert ActorConfig(skip_zero_advantage=True).skip_zero_advantage
    for other in ({"use_kl_loss": True}, {"entropy_coeff": 0.01}):
        with pytest.raises(ValidationError, match="skip_zero_advantage"):
            ActorConfig(skip_zero_advantage=True, **other)


def one_step(tmp_path, model, *, varied_reward: bool, extra: tuple[str, ...] = ()) -> dict[str, float]:
    overrides = [o for o in cpu_overrides(tmp_path, model, "sync") if not o.startswith(("reward.functions=",
                                                                                         "trainer.total_training_steps="))]
    overrides += ["trainer.total_training_steps=1", "actor_rollout_ref.actor.skip_zero_advantage=true",
                  "actor_rollout_ref.actor.ppo_mini_batch_size=2", *extra]
    if varied_reward:  # a reward that differs between samples: some groups have signal
        overrides.append("reward.functions=[e2e_agent:token_reward]")
    (step,) = [h for h in train(RECIPES / "grpo.yaml", overrides) if h["step"] == 1]
    return step


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_batch_without_signal_makes_no_optimizer_step(tmp_path, tiny_model_path):
    # the random model never answers right: every group is all-zero, every advantage 0
    step = one_step(tmp_path, tiny_model_path, varied_reward=False)
    assert step["adv/abs_max"] == 0 and step["actor/rows_skipped"] == step["batch/rows"] == 6
    assert "actor/optimizer_steps" not in step and step["policy_version"] == 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_only_rows_with_signal_are_updated_on_with_the_rollout_logprobs_as_old_ones(tmp_path, tiny_model_path):
    step = one_step(tmp_path, tiny_model_path, varied_reward=True,
                    extra=("algorithm.rollout_correction.bypass_mode=true",))
    assert "actor/entropy" not in step  # reported by the actor's recompute pass, which bypass_mode leaves out
    kept = step["batch/rows"] - step["actor/rows_skipped"]
    assert kept > 0 and step["adv/abs_max"] > 0
    # 2 rows per optimizer step: the mini-batches are cut from the kept rows only
    assert step["actor/optimizer_steps"] == -(-kept // 2) and step["policy_version"] == 1
