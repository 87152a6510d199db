"""SFT data: which stored sessions are selected, and rows that put the loss on actions only."""

from __future__ import annotations

import pytest

from agentr1.store import StepRecord, TraceStore
from agentr1.trainer.sft import SFTConfig, SFTData, build_sft_rows, select_demonstrations
from agentr1.trainer.sft.trainer import _check_micro_batches


def _session(store: TraceStore, run: str, *, task: str, group: str | None = None, status: str = "finished",
             reward: float | None = None, step_reward: float | None = None, steps: list[StepRecord] | None = None) -> str:
    sid = store.create_session(run_id=run, task_id=task, group_id=group)
    store.append_steps([StepRecord(sid, s.index, s.observation_ids, s.action_ids, s.action_logprobs,
                                   trainable=s.trainable) for s in steps or [StepRecord(sid, 0, [1, 2], [3, 4])]])
    if step_reward is not None:
        store.add_reward(sid, step_reward, step=0, source="environment")
    if status != "running":
        store.finish_session(sid, status=status, reward=reward)
    return sid


@pytest.fixture
def store(tmp_path):
    with TraceStore.open(str(tmp_path / "traces.db")) as opened:
        yield opened


def _data(store_url: str = "unused", **fields) -> SFTData:
    return SFTData(db=store_url, **fields)


def test_selection_by_run_status_and_reward(store):
    good = _session(store, "rollouts", task="a", reward=1.0)
    _session(store, "rollouts", task="b", reward=0.0)
    _session(store, "rollouts", task="c")  # no reward at all
    failed = _session(store, "rollouts", task="d", status="failed")
    _session(store, "rollouts", task="e", status="running")
    env_rewarded = _session(store, "rollouts", task="f", step_reward=1.0)  # an AgentEnvLoop-style step reward
    other = _session(store, "other", task="a", reward=1.0)

    everything = select_demonstrations(store, _data(run_ids=["rollouts"]))
    assert len(everything.sessions) == 4 and everything.metrics["sessions_in"] == 4  # finished only
    assert {s.id for s in select_demonstrations(store, _data(run_ids=["rollouts"], min_reward=1.0)).sessions} == {
        good, env_rewarded}
    assert {s.id for s in select_demonstrations(store, _data(min_reward=1.0)).sessions} == {good, env_rewarded, other}
    failed_only = select_demonstrations(store, _data(run_ids=["rollouts"], statuses=["failed"]))
    assert [s.id for s in failed_only.sessions] == [failed]
    both = select_demonstrations(store, _data(run_ids=["rollouts", "other"], min_reward=0.5))
    assert both.returns == {good: 1.0, env_rewarded: 1.0, other: 1.0}


def test_best_of_n_per_group_and_per_task(store):
    ids = {}
    for step, rewards in enumerate([[0.2, 0.9, 0.5], [0.7, 0.1, 0.3]]):
        for k, r in enumerate(rewards):
            ids[(step, k)] = _session(store, "rl", task="t1", group=f"rl/step{step}/t1", reward=r)
    best = select_demonstrations(store, _data(run_ids=["rl"], best_per_group=1))
    assert {s.id for s in best.sessions} == {ids[(0, 1)], ids[(1, 0)]}
    assert best.metrics["sessions_not_best_in_group"] == 4
    top2 = select_demonstrations(store, _data(run_ids=["rl"], best_per_group=2))
    assert {s.id for s in top2.sessions} == {ids[(0, 1)], ids[(0, 2)], ids[(1, 0)], ids[(1, 2)]}
    across = select_demonstrations(store, _data(run_ids=["rl"], best_per_group=1, group_by="task"))
    assert [s.id for s in across.sessions] == [ids[(0, 1)]]
    combined = select_demonstrations(store, _data(run_ids=["rl"], best_per_group=1, min_reward=0.8))
    assert [s.id for s in combined.sessions] == [ids[(0, 1)]]  # the best of step 1 (0.7) is below the bar


def test_bad_selections_fail_with_the_reason(store):
    _session(store, "rl", task="a", reward=0.0)
    with pytest.raises(ValueError, match="no run 'typo'"):
        select_demonstrations(store, _data(run_ids=["typo"]))
    with pytest.raises(ValueError, match=r"matched no sessions.*sessions_below_min_reward"):
        select_demonstrations(store, _data(run_ids=["rl"], min_reward=1.0))
    with pytest.raises(ValueError, match="unknown status"):
        select_demonstrations(store, _data(statuses=["done"]))


def test_multi_step_rows_put_loss_on_actions_only(store):
    """Three steps, each observation extending the last: feedback tokens (tool results, template
    glue) sit in the response with mask 0, the actions with mask 1; an untrainable step in a second
    session is left out."""
    obs0, act0 = [10, 11, 12], [20, 21, 2]
    fb0, act1 = [30, 31], [22, 23, 2]
    fb1, act2 = [32], [24, 2]
    steps = [StepRecord("", 0, obs0, act0, [-0.1] * 3), StepRecord("", 1, obs0 + act0 + fb0, act1, [-0.2] * 3),
             StepRecord("", 2, obs0 + act0 + fb0 + act1 + fb1, act2, [-0.3] * 2)]
    sid = _session(store, "demos", task="a", reward=1.0, steps=steps)
    _session(store, "demos", task="b", reward=1.0,
             steps=[StepRecord("", 0, [], [], None, trainable=False)])  # text only: skipped by default
    selection = select_demonstrations(store, _data(run_ids=["demos"]))

    merged = build_sft_rows(selection, _data(run_ids=["demos"]))
    (row,) = merged.rows
    assert row.session_id == sid and row.prompt_ids == obs0
    assert row.response_ids == act0 + fb0 + act1 + fb1 + act2
    assert row.response_mask == [1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1]
    assert merged.rendered_from_text == [False] and merged.metrics["steps_skipped_untrainable"] == 1

    per_step = build_sft_rows(selection, _data(run_ids=["demos"], layout="per_step"))
    assert [(r.prompt_ids, r.response_ids, r.response_mask) for r in per_step.rows] == [
        (s.observation_ids, s.action_ids, [1] * len(s.action_ids)) for s in steps]

    with pytest.raises(ValueError, match="max_length"):
        build_sft_rows(selection, _data(run_ids=["demos"], max_length=8))  # truncation: error by default


def test_config_is_strict_and_micro_batches_are_checked(tmp_path):
    path = tmp_path / "sft.yaml"
    path.write_text("data: {db: x.db, run_ids: [demos]}\noptim: {lr: 1.0e-4}\n")
    config = SFTConfig.from_yaml(path, ["trainer.total_epochs=3", "data.best_per_group=1"])
    assert (config.trainer.total_epochs, config.data.best_per_group, config.optim.lr) == (3, 1, 1e-4)
    with pytest.raises(ValueError, match="lrr"):
        SFTConfig.from_yaml(path, ["optim.lrr=1"])
    with pytest.raises(ValueError, match="best_per_group"):
        SFTConfig.from_yaml(path, ["data.best_per_group=-1"])
    _check_micro_batches(10, 4, 2)  # chunks of 4, 4, 2
    with pytest.raises(ValueError, match="micro_batch_size_per_gpu=2"):
        _check_micro_batches(9, 4, 2)  # a last chunk of 1
