"""agentr1.adapters.litellm and the LiteLLM example agent against a real gateway (real litellm)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import litellm
import pytest
from adapter_checks import exact_steps, load_example, new_run, run_sessions

from agentr1.adapters import litellm as a1
from agentr1.sdk import rollout, session

# litellm's own types trip a pydantic warning at import/first use; not ours
pytestmark = pytest.mark.filterwarnings("ignore:Items? .* using the `ReadOnly` qualifier:UserWarning")


@pytest.fixture(scope="module")
def example():
    return load_example("litellm_agent")


def test_example_sync_and_concurrent_async_agents_record_exact_sessions(gateway, example):
    url, store = gateway
    run_id = new_run()
    rewards = example.main([url, "--limit", "3", "--run-id", run_id])
    assert rewards == {f"{mode}/{task['id']}": 1.0 for mode in ("sync", "async") for task in example.TASKS}
    sessions = run_sessions(store, run_id)
    assert sorted(s.task_id for s in sessions) == sorted([t["id"] for t in example.TASKS] * 2)
    for s in sessions:
        assert s.status == "finished" and s.reward == 1.0
        steps = exact_steps(store, s.id, 2)
        question = next(t["question"] for t in example.TASKS if t["id"] == s.task_id)
        assert steps[0].messages_sent[-1]["content"] == question  # concurrent sessions never mixed up


def test_zero_code_plain_litellm_on_v1_follows_the_rollout(gateway, example, monkeypatch):
    """litellm.completion("openai/...", api_base=<gateway>/v1) as the agent wrote it: propagation attributes it."""
    url, store = gateway
    plain = {"api_base": f"{url}/v1", "api_key": "sk-anything"}
    monkeypatch.setattr(example, "a1", SimpleNamespace(
        completion=lambda model, **kw: litellm.completion(model=f"openai/{model}", **plain, **kw),
        acompletion=lambda model, **kw: litellm.acompletion(model=f"openai/{model}", **plain, **kw)))
    run_id = new_run()
    assert example.solve(example.TASKS[0], model="policy", run_id=run_id) == 1.0
    assert asyncio.run(example.asolve(example.TASKS[1], model="policy", run_id=run_id)) == 1.0
    sessions = run_sessions(store, run_id)
    assert len(sessions) == 2
    for s in sessions:
        exact_steps(store, s.id, 2)


def test_kwargs_bind_inside_a_session_and_follow_outside(gateway):
    url, _ = gateway
    assert a1.kwargs("policy") == {"model": "openai/policy", "api_base": f"{url}/v1", "api_key": "agentr1"}
    with session() as active:
        assert a1.kwargs("openai/policy") == {"model": "openai/policy", "api_base": active.base_url,
                                              "api_key": active.api_key}


def test_streaming_completion_is_one_recorded_step(gateway):
    _, store = gateway

    @rollout
    def agent():
        from agentr1.sdk import current_session

        chunks = a1.completion("policy", messages=[{"role": "user", "content": "stream me"}], stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), current_session().id

    text, sid = agent()
    assert text == "echo: stream me"
    (step,) = store.get_session(sid).steps
    assert step.messages_sent[-1]["content"] == "stream me" and step.finish_reason == "stop"
