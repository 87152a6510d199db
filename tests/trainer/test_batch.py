"""Batch builder on hand-built traces: exact ids, both layouts, rewrites, branches, truncation."""

from __future__ import annotations

import pytest

from agentr1.store.records import SessionRecord, StepRecord
from agentr1.trainer.batch import (
    BatchConfig,
    RowTooLongError,
    build_rows,
    metadata_anchor,
    observation_anchor,
    text_anchor,
)
from agentr1.trainer.rewards import RewardConfig, assemble_rewards
from agentr1.trainer.rows import Segment

SYSTEM = [1, 2, 3, 4]


def step(session: str, index: int, obs: list[int], action: list[int], *, parent: int | str | None = "auto",
         logprobs: list[float] | str | None = "auto", **kw) -> StepRecord:
    if parent == "auto":
        parent = index - 1 if index else None
    if logprobs == "auto":
        logprobs = [-(index + 1) / 10 - k / 100 for k in range(len(action))]
    return StepRecord(session, index, list(obs), list(action), logprobs, parent_index=parent, **kw)


def append_only(session: str = "s", *, turns: int = 3, reward: float | None = 1.0, group: str | None = "g",
                status: str = "finished") -> SessionRecord:
    """obs_{t+1} = obs_t + action_t + feedback_t: the gateway's continuation bridge."""
    steps, obs = [], list(SYSTEM)
    for i in range(turns):
        action = [100 + 10 * i, 101 + 10 * i, 102 + 10 * i]
        steps.append(step(session, i, obs, action, policy_version=7 + i))
        obs = obs + action + [900 + i, 901 + i]  # tool result tokens
    return SessionRecord(session, task_id="t", group_id=group, status=status, reward=reward, steps=steps)


def test_per_step_rows_use_the_stored_ids():
    session = append_only()
    batch = build_rows([session], BatchConfig(layout="per_step"))
    assert len(batch.rows) == 3
    for row, st in zip(batch.rows, session.steps, strict=True):
        assert row.prompt_ids == st.observation_ids
        assert row.response_ids == st.action_ids
        assert row.response_mask == [1, 1, 1]
        assert row.old_logprobs == st.action_logprobs
        assert row.segments == [Segment(st.index, 0, 3)]
        assert row.session_id == "s" and row.group_id == "g" and row.task_id == "t"
        assert row.policy_version == st.policy_version
        assert row.anchor_keys == [observation_anchor(st.observation_ids)]
        assert row.outcome_reward == 1.0
    # the outcome sits on the last action token of the last step, nothing else is rewarded
    assert [r.token_rewards for r in batch.rows] == [[0, 0, 0], [0, 0, 0], [0, 0, 1.0]]
    assert batch.metrics["rows"] == 3 and batch.metrics["steps_used"] == 3
    assert batch.num_tokens == batch.metrics["tokens"] == sum(len(s.observation_ids) + 3 for s in session.steps)


def test_merged_append_only_trajectory_is_one_row():
    session = append_only()
    session.steps[0].reward = 0.25  # a process reward on step 0
    batch = build_rows([session], BatchConfig(layout="merged"))
    assert len(batch.rows) == 1
    row = batch.rows[0]
    last = session.steps[-1]
    assert row.prompt_ids == SYSTEM
    assert row.prompt_ids + row.response_ids == last.observation_ids + last.action_ids  # exact, no re-tokenizing
    assert row.response_ids == [100, 101, 102, 900, 901, 110, 111, 112, 901, 902, 120, 121, 122]
    assert row.response_mask == [1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1]
    lp = [s.action_logprobs for s in session.steps]
    assert row.old_logprobs == [*lp[0], 0.0, 0.0, *lp[1], 0.0, 0.0, *lp[2]]
    assert row.token_rewards == [0, 0, 0.25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1.0]
    assert row.segments == [Segment(0, 0, 3), Segment(1, 5, 8), Segment(2, 10, 13)]
    assert row.anchor_keys == [observation_anchor(s.observation_ids) for s in session.steps]
    assert row.policy_version == 7  # the oldest policy that sampled a token of the row
    assert batch.metrics["tokens"] == len(last.observation_ids) + 3


def test_merged_context_rewrite_starts_a_new_row():
    session = append_only(turns=4)
    # step 2 sees a summary instead of the full history (a context policy rewrite); step 3 extends step 2 again
    summary = [*SYSTEM, 555, 556]
    session.steps[2].observation_ids = summary
    session.steps[3].observation_ids = [*summary, *session.steps[2].action_ids, 902, 903]
    batch = build_rows([session], BatchConfig(layout="merged"))
    assert [[s.step_index for s in r.segments] for r in batch.rows] == [[0, 1], [2, 3]]
    assert batch.rows[1].prompt_ids == summary
    assert batch.rows[1].response_mask == [1, 1, 1, 0, 0, 1, 1, 1]
    assert batch.metrics["new_row_context_rewrite"] == 1


def test_merged_drift_starts_a_new_row_even_if_the_ids_extend():
    session = append_only()
    session.steps[1].drift = True
    batch = build_rows([session], BatchConfig(layout="merged"))
    assert [[s.step_index for s in r.segments] for r in batch.rows] == [[0], [1, 2]]
    assert batch.metrics["new_row_drift"] == 1


def test_merged_branch_starts_a_new_row():
    # steps 0-1-2 chain; step 3 continues step 1 again (a branch: its parent is not step 2)
    session = append_only()
    s1 = session.steps[1]
    branch_obs = [*s1.observation_ids, *s1.action_ids, 777]
    session.steps.append(step("s", 3, branch_obs, [130, 131], parent=1))
    batch = build_rows([session], BatchConfig(layout="merged"))
    assert [[s.step_index for s in r.segments] for r in batch.rows] == [[0, 1, 2], [3]]
    assert batch.rows[1].prompt_ids == branch_obs  # the branch's own observation, as stored
    assert batch.metrics["new_row_branch"] == 1


def test_merged_n_choices_siblings_and_the_continued_choice():
    # one call with n=2 -> steps 0 and 1 (same observation, parent None); the agent continues choice 1
    obs = list(SYSTEM)
    s0 = step("s", 0, obs, [10, 11], parent=None)
    s1 = step("s", 1, obs, [20, 21], parent=None)
    s2 = step("s", 2, [*obs, 20, 21, 5], [30], parent=1)
    session = SessionRecord("s", group_id="g", status="finished", reward=1.0, steps=[s0, s1, s2])
    batch = build_rows([session], BatchConfig(layout="merged"))
    assert [[s.step_index for s in r.segments] for r in batch.rows] == [[0], [1, 2]]
    assert batch.rows[1].response_ids == [20, 21, 5, 30]


def test_untrainable_and_empty_steps_are_skipped_and_their_rewards_kept():
    session = append_only(turns=4)
    session.steps[1].trainable = False  # e.g. a teacher model behind litellm
    session.steps[1].reward = 0.5
    session.steps[3].action_ids, session.steps[3].action_logprobs = [], []  # empty action
    batch = build_rows([session], BatchConfig(layout="merged"))
    # step 1's action is context now (mask 0) inside one row: the ids still extend
    assert [[s.step_index for s in r.segments] for r in batch.rows] == [[0, 2]]
    row = batch.rows[0]
    assert row.response_ids[:8] == [100, 101, 102, 900, 901, 110, 111, 112]
    assert row.response_mask[:13] == [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1]
    # step 1's process reward moves to step 0; the outcome goes to step 2, the last trainable step
    assert row.token_rewards[2] == 0.5 and row.token_rewards[-1] == 1.0 and sum(row.token_rewards) == 1.5
    m = batch.metrics
    assert (m["steps_skipped_untrainable"], m["steps_skipped_empty_action"], m["rewards_relocated"]) == (1, 1, 1)


def test_missing_and_bad_logprobs():
    session = append_only()
    session.steps[0].action_logprobs = None
    session.steps[2].action_logprobs = [-0.1]  # wrong length: data we cannot trust
    batch = build_rows([session], BatchConfig(layout="per_step"))
    assert [r.segments[0].step_index for r in batch.rows] == [0, 1]
    assert batch.rows[0].old_logprobs == [0.0, 0.0, 0.0] and not batch.rows[0].has_old_logprobs
    assert batch.rows[1].has_old_logprobs
    assert batch.metrics["steps_without_logprobs"] == 1 and batch.metrics["steps_skipped_bad_logprobs"] == 1
    assert batch.rows[1].token_rewards == [0, 0, 1.0]  # the skipped last step's outcome moved back one step


def test_truncation_split_keeps_the_head_of_a_too_long_action():
    session = append_only(turns=1)
    batch = build_rows([session], BatchConfig(layout="per_step", max_length=6, truncation="split"))
    row = batch.rows[0]
    assert row.prompt_ids == SYSTEM and row.response_ids == [100, 101] and row.length == 6
    assert row.token_rewards == [0.0, 1.0] and row.segments == [Segment(0, 0, 2)]
    assert batch.metrics["steps_action_truncated"] == 1 and batch.metrics["tokens_truncated"] == 1


def test_truncation_drop_and_error():
    session = append_only(turns=2)
    batch = build_rows([session], BatchConfig(layout="per_step", max_length=8, truncation="drop"))
    assert [r.segments[0].step_index for r in batch.rows] == [0]  # step 1 has 9 + 3 tokens
    assert batch.rows[0].token_rewards == [0, 0, 1.0]  # the dropped step's outcome moved to step 0
    assert batch.metrics["steps_dropped_too_long"] == 1
    with pytest.raises(RowTooLongError, match="max_length=8"):
        build_rows([session], BatchConfig(max_length=8, truncation="error"))


def test_merged_rows_respect_max_length():
    # append-only: a merged row is exactly as long as its last step alone (7, 12, 17 tokens here)
    session = append_only(turns=3)
    batch = build_rows([session], BatchConfig(layout="merged", max_length=12))
    assert [[s.step_index for s in r.segments] for r in batch.rows] == [[0, 1]]  # step 2's observation is 14
    assert batch.rows[0].length == 12 and batch.rows[0].token_rewards[-1] == 1.0
    assert batch.metrics["steps_dropped_too_long"] == 1 and batch.metrics["rewards_relocated"] == 1
    batch = build_rows([session], BatchConfig(layout="merged", max_length=15))
    assert [[s.step_index for s in r.segments] for r in batch.rows] == [[0, 1, 2]]
    assert batch.rows[0].length == 15 and batch.rows[0].response_ids[-1] == 120
    assert batch.metrics["steps_action_truncated"] == 1 and batch.metrics["tokens_truncated"] == 2


def test_running_sessions_are_skipped_and_groups_fall_back():
    running = append_only("r", status="running")
    no_group = append_only("n", group=None)
    alone = append_only("a", group=None)
    alone.task_id = None
    batch = build_rows([running, no_group, alone])
    assert {r.session_id for r in batch.rows} == {"n", "a"}
    assert {r.session_id: r.group_id for r in batch.rows} == {"n": "task:t", "a": "session:a"}
    assert batch.metrics["sessions_skipped_status"] == 1


def test_session_without_trainable_steps_yields_no_rows():
    session = append_only()
    for s in session.steps:
        s.trainable = False
    batch = build_rows([session])
    assert batch.rows == [] and batch.metrics["sessions_without_rows"] == 1 and batch.metrics["rewards_lost"] == 1


def test_rewards_given_explicitly_and_missing():
    a, b = append_only("a"), append_only("b")
    rewards = assemble_rewards([a, b], RewardConfig(outcome_placement="spread"))
    batch = build_rows([a, b], BatchConfig(layout="merged"), rewards=rewards)
    assert [t for t in batch.rows[0].token_rewards if t] == pytest.approx([1 / 3] * 3)
    with pytest.raises(KeyError, match="no rewards given for session b"):
        build_rows([a, b], rewards={"a": rewards["a"]})


def test_anchor_keys():
    assert observation_anchor([1, 2, 3]) == observation_anchor([1, 2, 3]) != observation_anchor([1, 2, 4])
    assert text_anchor("You are in  the kitchen.\n") == text_anchor(" You are in the kitchen.")
    session = append_only()
    session.metadata["anchors"] = {"0": "room A", "1": "room B"}
    batch = build_rows([session], BatchConfig(layout="merged", anchor_fn=metadata_anchor))
    assert batch.rows[0].anchor_keys == [text_anchor("room A"), text_anchor("room B"),
                                         observation_anchor(session.steps[2].observation_ids)]


def test_config_is_validated():
    with pytest.raises(ValueError, match="layout"):
        BatchConfig(layout="flat")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="truncation"):
        BatchConfig(truncation="cut")  # type: ignore[arg-type]
