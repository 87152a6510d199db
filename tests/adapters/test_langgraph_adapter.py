"""agentr1.adapters.langchain and the LangGraph ReAct example agent against a real gateway."""

from __future__ import annotations

import uuid

import pytest
from adapter_checks import exact_steps, load_example, new_run, run_sessions
from langchain_openai import ChatOpenAI

from agentr1.adapters.langchain import chat_model
from agentr1.sdk import current_session, rollout, session


@pytest.fixture(scope="module")
def example():
    return load_example("langgraph_react_agent")


def test_example_react_graph_built_once_records_one_exact_two_step_session_per_rollout(gateway, example):
    url, store = gateway
    run_id = new_run()
    assert example.main([url, "--run-id", run_id]) == {t["id"]: 1.0 for t in example.TASKS}
    sessions = run_sessions(store, run_id)
    assert sorted(s.task_id for s in sessions) == sorted(t["id"] for t in example.TASKS)
    for s in sessions:
        assert s.status == "finished" and s.reward == 1.0
        call, answer = exact_steps(store, s.id, 2)  # tool call -> tool result -> answer
        task = next(t for t in example.TASKS if t["id"] == s.task_id)
        assert call.messages_sent[-1]["content"] == task["question"]
        assert call.feedback_messages[0]["role"] == "tool"
        assert call.feedback_messages[0]["content"] == str(task["answer"])
        assert answer.action["content"] == f"The answer is {task['answer']}."


def test_zero_code_plain_chat_openai_on_v1_follows_the_rollout(gateway, example, monkeypatch):
    """The graph as its author wrote it (ChatOpenAI(base_url=<gateway>/v1)); only @rollout around the run."""
    url, store = gateway
    monkeypatch.setattr(example, "chat_model",
                        lambda model, **kw: ChatOpenAI(model=model, base_url=f"{url}/v1", api_key="sk-any", **kw))
    agent = example.build_agent("policy")
    run_id = new_run()
    assert example.solve(example.TASKS[0], agent=agent, run_id=run_id) == 1.0
    assert example.solve(example.TASKS[1], agent=agent, run_id=run_id) == 1.0
    for s in run_sessions(store, run_id):
        exact_steps(store, s.id, 2)


def test_without_any_sdk_the_run_still_becomes_one_auto_session(gateway, example, monkeypatch):
    """No session at all: the gateway's auto session follows the conversation across both calls."""
    url, store = gateway
    monkeypatch.setattr(example, "chat_model",
                        lambda model, **kw: ChatOpenAI(model=model, base_url=f"{url}/v1", api_key="sk-any", **kw))
    a, b = 100 + uuid.uuid4().int % 900, 7  # a question no other test asks
    state = example.build_agent("policy").invoke({"messages": [("user", f"What is {a}*{b}?")]})
    assert state["messages"][-1].content == f"The answer is {a * b}."
    auto = [s for s in store.list_sessions(None, limit=10_000) if s.metadata.get("auto")]
    mine = [s for s in auto if (steps := store.get_session(s.id).steps)
            and steps[0].messages_sent[-1]["content"] == f"What is {a}*{b}?"]
    assert len(mine) == 1
    exact_steps(store, mine[0].id, 2)


def test_chat_model_binds_inside_a_session_and_follows_outside(gateway):
    url, store = gateway
    outside = chat_model("policy")
    assert outside.openai_api_base == f"{url}/v1"

    @rollout
    def agent():
        inside = chat_model("policy")
        assert inside.openai_api_base == current_session().base_url
        assert inside.invoke("inside").content == "echo: inside"
        assert outside.invoke("outside").content == "echo: outside"
        return current_session().id

    sid = agent()
    assert [st.messages_sent[-1]["content"] for st in store.get_session(sid).steps] == ["inside", "outside"]
    with session() as s:
        assert outside.invoke("again").content == "echo: again"
    assert len(store.get_session(s.id).steps) == 1
