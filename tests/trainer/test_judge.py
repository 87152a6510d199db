"""The LLM judge as a reward: a real second agentr1 gateway serves the judge model over HTTP; the
judge's calls are recorded in the training store as untrainable steps linked to the judged session;
scores are parsed strictly (a reply without one exact `SCORE:` line is a recorded failure, never 0);
the same input is judged once; the budget holds."""

from __future__ import annotations

import pytest

from agentr1.engine import EngineOptions
from agentr1.gateway.app import create_app
from agentr1.gateway.backends import LocalBackend
from agentr1.gateway.server import BackgroundServer
from agentr1.gateway.settings import GatewaySettings
from agentr1.store import StepRecord, TraceStore
from agentr1.trainer.config import JobConfig, JudgeConfig
from agentr1.trainer.groups import failure_of
from agentr1.trainer.judge import Judge, JudgeBudgetExceeded, JudgeFailure, parse_score
from agentr1.trainer.rewards import RewardConfig
from agentr1.trainer.scoring import Scorer

TASK = {"id": "t1", "question": "What is 5 + 7?", "answer": 12}


@pytest.mark.parametrize(("reply", "score"), [
    ("SCORE: 7", 0.7), ("The answer is right.\nSCORE: 10\n", 1.0), ("  score:0  ", 0.0), ("SCORE: 2.5", 0.25),
])
def test_a_score_line_parses(reply, score):
    assert parse_score(reply, 10.0) == pytest.approx(score)


@pytest.mark.parametrize(("reply", "why"), [
    ("", "0 'SCORE: <number>' lines"), ("I would give it a 7.", "0 'SCORE"), ("SCORE: 7/10", "0 'SCORE"),
    ("SCORE: 3\nSCORE: 9", "2 'SCORE"), ("SCORE: 11", "outside"), ("SCORE: -1", "outside"), ("Score: seven", "0 'SCORE"),
])
def test_anything_else_is_a_judge_failure_not_a_zero(reply, why):
    with pytest.raises(JudgeFailure, match=why):
        parse_score(reply, 10.0)


def test_a_rubric_with_unknown_fields_is_rejected_at_load():
    with pytest.raises(ValueError, match=r"unknown fields \['solution'\]"):
        JudgeConfig(base_url="http://127.0.0.1:1/v1", rubric="Grade {solution}")
    with pytest.raises(ValueError, match="http"):
        JobConfig.model_validate({"agent": {"entrypoint": "m:f"}, "reward": {"judge": {"base_url": "localhost:8000"}}})


def judged_session(store: TraceStore, run_id: str, content: str, task_id: str = "t1") -> str:
    """A finished session of the training run with one trainable step whose answer is ``content``."""
    sid = store.create_session(run_id=run_id, task_id=task_id, group_id=f"{run_id}/g")
    store.append_steps([StepRecord(session_id=sid, index=0, observation_ids=[1, 2, 3], action_ids=[4, 5],
                                   action_logprobs=[-0.1, -0.2], action={"content": content},
                                   sampling={"temperature": 1.0, "top_p": 1.0})])
    store.finish_session(sid)
    return sid


@pytest.fixture
def judge_gateway(tmp_path, tiny_model_path):
    """A second, real agentr1 gateway serving the tiny random model as ``judge``, with its own store."""
    backend = LocalBackend(tiny_model_path, EngineOptions(device="cpu"), model_name="judge")
    store = TraceStore.open(str(tmp_path / "judge_gateway.db"))
    app = create_app(GatewaySettings(db=str(tmp_path / "judge_gateway.db"), accept_any_model=True), store=store,
                     backend=backend)
    with BackgroundServer(app) as url:
        yield url, store
    store.close()


def test_judge_calls_are_recorded_linked_cached_and_budgeted(tmp_path, judge_gateway):
    url, judge_store = judge_gateway
    store = TraceStore.open(str(tmp_path / "traces.db"))
    first = judged_session(store, "run", "The answer is 12.")
    config = JudgeConfig(base_url=f"{url}/v1", max_calls=2, over_budget="error", max_tokens=12)
    judge = Judge(config, store, "run")

    # the tiny random model cannot write a SCORE line: a failure, recorded with the judge's text
    sessions, rewards = Scorer(store, {"judge": judge}, RewardConfig()).score([first], {"t1": TASK})
    assert "unparseable judge reply" in rewards[first].failures["judge"]
    assert failure_of(sessions[0], rewards[first]) == "judge"  # the groups stage will not train it
    assert not [r for r in sessions[0].rewards if r.source == "judge"]  # no silent 0 stored
    [record] = store.list_sessions("run-judge")
    assert record.status == "failed" and record.metadata["judge_of"] == first and record.metadata["score"] is None
    [step] = store.get_session(record.id).steps
    assert not step.trainable and step.backend == "judge" and step.action_ids == [] and step.model == "judge"
    assert "What is 5 + 7?" in step.messages_sent[0]["content"] and "The answer is 12." in step.messages_sent[0]["content"]
    # the judge gateway served it: its own trace holds the same text
    [served] = judge_store.list_sessions(limit=10)
    assert judge_store.get_session(served.id).steps[0].action["content"] == step.action["content"]
    assert record.metadata["remote"]["session_id"] == served.id

    # same input: answered from the cache, no second call anywhere
    with pytest.raises(JudgeFailure, match="unparseable"):
        judge(store.get_session(first), TASK)
    assert len(judge_store.list_sessions(limit=10)) == 1 and len(store.list_sessions("run-judge")) == 1
    # a resumed run rebuilds cache and budget from the recorded judge sessions
    resumed = Judge(config, store, "run")
    assert resumed.calls == 1
    with pytest.raises(JudgeFailure, match="unparseable"):
        resumed(store.get_session(first), TASK)
    assert resumed.take_metrics() == {"judge/calls": 0.0, "judge/cache_hits": 1.0, "judge/failures": 1.0,
                                      "judge/over_budget": 0.0}

    # the budget: the second new input is call 2 of 2, the third is over budget
    second, third = (judged_session(store, "run", text) for text in ("12", "Twelve."))
    with pytest.raises(JudgeFailure, match="unparseable"):
        resumed(store.get_session(second), TASK)
    with pytest.raises(JudgeBudgetExceeded, match=r"max_calls=2"):
        resumed(store.get_session(third), TASK)
    skipping = Judge(config.model_copy(update={"over_budget": "skip"}), store, "run")
    with pytest.raises(JudgeFailure, match="judge budget spent"):
        skipping(store.get_session(third), TASK)
    assert len(judge_store.list_sessions(limit=10)) == 2
    store.close()


def test_an_unreachable_judge_is_a_failure_that_is_not_cached(tmp_path):
    store = TraceStore.open(str(tmp_path / "traces.db"))
    sid = judged_session(store, "run", "12")
    judge = Judge(JudgeConfig(base_url="http://127.0.0.1:9/v1", timeout_s=5), store, "run")
    for _ in range(2):
        with pytest.raises(JudgeFailure, match="judge call failed: APIConnectionError"):
            judge(store.get_session(sid), TASK)
    assert judge.take_metrics()["judge/calls"] == 2.0  # tried again: a transient failure is not remembered
    store.close()


EXAMPLES = [{"reference": "12", "answer": "The answer is 12.", "score": 10},
            {"reference": "9", "answer": "It is 8.", "score": 0}, {"reference": "30", "answer": "30", "score": 10}]
SHORT_RUBRIC = ("Reference answer: {reference}\nAssistant's answer: {answer}\n"
                "Reply SCORE: {max_score} if the assistant's answer equals the reference, SCORE: 0 if not.")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", ["outcome", "process"])
def test_a_real_judge_model_scores_sessions_and_steps(tmp_path, smollm2_path, mode):
    """SmolLM2-135M behind a second gateway, shown three worked examples, writes a SCORE line that parses
    (with two it wrote 'SCORE: 10 if the', a judge failure);
    the score is stored as a judge reward on the session (or on each step, mode process)."""
    backend = LocalBackend(smollm2_path, EngineOptions(device="cpu"), model_name="judge")
    # the gateway closes the engine when it stops (else its worker kept 1.1 GiB for the rest of the suite)
    app = create_app(GatewaySettings(db=str(tmp_path / "judge_gateway.db"), accept_any_model=True), backend=backend,
                     owns_backend=True)
    store = TraceStore.open(str(tmp_path / "traces.db"))
    sid = judged_session(store, "run", "The answer is 12.")
    with BackgroundServer(app) as url:
        config = JudgeConfig(base_url=f"{url}/v1", rubric=SHORT_RUBRIC, examples=EXAMPLES, mode=mode, max_tokens=8,
                             timeout_s=600)
        judge = Judge(config, store, "run")
        sessions, rewards = Scorer(store, {"judge": judge}, RewardConfig()).score([sid], {"t1": TASK})
    assert rewards[sid].failures == {}
    [record] = store.list_sessions("run-judge")
    assert record.status == "finished" and record.metadata["judge_of"] == sid
    [step] = store.get_session(record.id).steps
    assert parse_score(step.action["content"], 10.0) == record.metadata["score"]  # what the judge wrote, parsed
    assert [m["role"] for m in step.messages_sent] == ["user", "assistant"] * 3 + ["user"]
    [stored] = [r for r in sessions[0].rewards if r.source == "judge"]
    assert stored.value == record.metadata["score"] and stored.step_index == (None if mode == "outcome" else 0)
    assert rewards[sid].total == pytest.approx(record.metadata["score"])
    store.close()


@pytest.mark.timeout(900)
def test_in_the_training_loop_unscorable_sessions_are_counted_and_never_trained(tmp_path, tiny_model_path,
                                                                                judge_gateway):
    """`reward.judge` in a real training step: the tiny judge never writes a SCORE line, so every
    session is a judge failure, every group is dropped, and the policy is not updated on zeros."""
    import json

    from agentr1.trainer.loop import Trainer

    url, _ = judge_gateway
    config = JobConfig.model_validate({
        "run_name": "judged", "db": f"sqlite:///{tmp_path / 'traces.db'}",
        "agent": {"entrypoint": "e2e_agent:solve", "timeout_s": 120},
        "data": {"generator": "e2e_agent:make_tasks", "train_size": 4, "val_size": 1, "train_batch_size": 2},
        "reward": {"judge": {"base_url": f"{url}/v1", "max_tokens": 6}},
        "actor_rollout_ref": {"model": str(tiny_model_path), "rollout": {"n": 3, "max_concurrency": 6}},
        "trainer": {"total_training_steps": 1, "default_local_dir": str(tmp_path / "out"), "device": "cpu"},
    })
    trainer = Trainer(config, quiet=True)
    trainer.setup()
    try:
        trainer.train()
        run_id = trainer.run.progress.run_id
    finally:
        trainer.close()
    step = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()][-1]
    assert step["step"] == 1 and step["failures/judge"] == 6 and step["groups/dropped"] == 2
    # 6 training sessions and the held-out task evaluated before training, greedily and once sampled (the default
    # rollout.val_kwargs); the judge's counters run until an update
    assert step["judge/calls"] + step["judge/cache_hits"] == 8 and step["batch/rows"] == 0
    assert "actor/optimizer_steps" not in step  # nothing to train on: no update on made-up zeros
    with TraceStore.open(tmp_path / "traces.db") as store:
        judged = {s.metadata["judge_of"] for s in store.list_sessions(f"{run_id}-judge", limit=100)}
        trained = {s.id for s in store.list_sessions(run_id, limit=100)}
        assert trained <= judged and not [r for sid in trained for r in store.get_session(sid).rewards
                                          if r.source == "judge"]
