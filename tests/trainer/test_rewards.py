"""Per-step reward assembly: outcome placement, stored step rewards, reward functions, bad values."""

from __future__ import annotations

import math

import pytest

from agentr1.store.records import SessionRecord, StepRecord
from agentr1.trainer.batch import BatchConfig, build_rows
from agentr1.trainer.rewards import (
    RewardConfig,
    RewardError,
    assemble_rewards,
    assemble_session_rewards,
    get_reward_fn,
    list_reward_fns,
    register_reward_fn,
)


def session(n: int = 3, *, reward: float | None = 1.0, sid: str = "s", task: str = "t") -> SessionRecord:
    steps = [StepRecord(sid, i, [1, 2, i], [10 + i], [-0.5]) for i in range(n)]
    return SessionRecord(sid, task_id=task, group_id="g", status="finished", reward=reward, steps=steps)


def test_outcome_goes_on_the_last_trainable_step():
    s = session()
    s.steps[2].trainable = False
    r = assemble_session_rewards(s)
    assert r.steps == {0: 0.0, 1: 1.0, 2: 0.0} and r.outcome == 1.0 and r.has_outcome


def test_outcome_spread_and_weight():
    r = assemble_session_rewards(session(4, reward=2.0), config=RewardConfig(outcome_placement="spread",
                                                                             outcome_weight=0.5))
    assert r.steps == {i: 0.25 for i in range(4)} and r.outcome == 1.0 and r.total == pytest.approx(1.0)


def test_stored_step_rewards_add_to_the_outcome():
    s = session()
    s.steps[0].reward, s.steps[2].reward = 0.1, -0.2
    r = assemble_session_rewards(s)
    assert r.steps == pytest.approx({0: 0.1, 1: 0.0, 2: 0.8})
    assert r.components == {"outcome": {2: 1.0}, "step": {0: 0.1, 2: -0.2}}
    off = assemble_session_rewards(s, config=RewardConfig(use_step_rewards=False))
    assert off.steps == {0: 0.0, 1: 0.0, 2: 1.0}


def test_missing_outcome_is_reported_not_invented():
    r = assemble_session_rewards(session(reward=None))
    assert r.steps == {0: 0.0, 1: 0.0, 2: 0.0} and r.outcome == 0.0 and not r.has_outcome


def test_reward_functions_by_name_float_and_per_step():
    seen = []

    @register_reward_fn("test_exact_answer")
    def exact(sess, task):
        seen.append((sess.id, task))
        return 1.0 if task == {"answer": 42} else 0.0

    @register_reward_fn("test_format")
    def fmt(sess, task):
        return {s.index: 0.1 for s in sess.steps}

    assert "test_exact_answer" in list_reward_fns() and get_reward_fn("test_format") is fmt
    cfg = RewardConfig(functions={"test_exact_answer": 2.0, "test_format": 1.0})
    out = assemble_rewards([session(reward=None)], cfg, tasks={"t": {"answer": 42}})
    r = out["s"]
    assert seen == [("s", {"answer": 42})]
    assert r.steps == pytest.approx({0: 0.1, 1: 0.1, 2: 2.1}) and r.outcome == 2.0 and r.has_outcome
    # a callable task lookup and an unregistered function passed directly
    out = assemble_rewards([session()], RewardConfig(functions={"inline": 1.0}), tasks=lambda s: s.task_id,
                           functions={"inline": lambda sess, task: 3.0 if task == "t" else 0.0})
    assert out["s"].steps[2] == 4.0 and out["s"].outcome == 4.0


@pytest.mark.parametrize(("value", "match"), [
    (None, "is None"),
    (math.nan, "is nan"),
    (math.inf, "is inf"),
    ("1.0", "not a number"),
    ({0: math.nan}, "step 0, is nan"),
    ({0: None}, "step 0, is None"),
    ({7: 1.0}, "step 7, which the session does not have"),
])
def test_bad_reward_function_results_fail_clearly(value, match):
    cfg = RewardConfig(functions={"bad": 1.0})
    with pytest.raises(RewardError, match=match) as info:
        assemble_session_rewards(session(), config=cfg, functions={"bad": lambda s, t: value})
    assert "'bad'" in str(info.value) and "session s" in str(info.value)


def test_reward_function_exceptions_and_unknown_names():
    def boom(sess, task):
        raise ZeroDivisionError("no")

    with pytest.raises(RewardError, match="'boom' on session s raised ZeroDivisionError"):
        assemble_session_rewards(session(), config=RewardConfig(functions={"boom": 1.0}), functions={"boom": boom})
    with pytest.raises(KeyError, match="unknown reward function 'nope'"):
        assemble_session_rewards(session(), config=RewardConfig(functions={"nope": 1.0}))
    first = register_reward_fn("test_twice")(lambda s, t: 0.0)
    assert register_reward_fn("test_twice")(first) is first  # registering the same function again is fine
    with pytest.raises(ValueError, match="already registered"):
        register_reward_fn("test_twice")(lambda s, t: 1.0)


def test_nan_in_the_store_is_an_error_too():
    s = session()
    s.steps[1].reward = math.nan
    with pytest.raises(RewardError, match="reward of step 1 of session s is nan"):
        assemble_session_rewards(s)


def test_assembled_rewards_reach_the_token_rewards():
    s = session()
    s.steps[0].reward = 0.5
    rewards = assemble_rewards([s], RewardConfig(functions={"f": 1.0}),
                               functions={"f": lambda sess, task: {1: 0.25}})
    batch = build_rows([s], BatchConfig(layout="per_step"), rewards=rewards)
    assert [r.token_rewards for r in batch.rows] == [[0.5], [0.25], [1.0]]
