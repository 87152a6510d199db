"""agentr1.adapters.openai and the OpenAI-SDK example agent (sync, async, streaming) against a real gateway."""

from __future__ import annotations

import asyncio

import openai
import pytest
from adapter_checks import exact_steps, load_example, new_run, run_sessions

from agentr1.adapters.openai import async_client, client
from agentr1.sdk import current_session, rollout, session


@pytest.fixture(scope="module")
def example():
    return load_example("openai_sdk_agent")


def test_example_sync_async_and_streaming_agents_record_exact_two_step_sessions(gateway, example):
    url, store = gateway
    run_id = new_run()
    rewards = example.main([url, "--limit", "2", "--run-id", run_id])
    assert rewards == {f"{mode}/{task}": 1.0 for task in ("mul-12-7", "add-35-48")
                       for mode in ("sync", "async", "streaming")}
    sessions = run_sessions(store, run_id)
    assert sorted(s.task_id for s in sessions) == sorted(["mul-12-7", "add-35-48"] * 3)
    for s in sessions:
        assert s.status == "finished" and s.reward == 1.0 and s.group_id == s.task_id
        steps = exact_steps(store, s.id, 2)
        question = next(t["question"] for t in example.TASKS if t["id"] == s.task_id)
        assert steps[0].messages_sent[-1]["content"] == question


def test_zero_code_plain_client_on_v1_follows_the_rollout(gateway, example, monkeypatch):
    """An agent's own client on the gateway's /v1, made once: the SDK's header propagation attributes it."""
    url, store = gateway
    plain = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-anything")
    monkeypatch.setattr(example, "client", lambda: plain)
    run_id = new_run()
    assert example.solve_sync(example.TASKS[2], model="policy", run_id=run_id) == 1.0
    assert example.solve_streaming(example.TASKS[0], model="policy", run_id=run_id) == 1.0
    sessions = run_sessions(store, run_id)
    assert len(sessions) == 2
    for s in sessions:
        exact_steps(store, s.id, 2)


def test_client_made_outside_a_session_follows_whichever_session_is_active(gateway):
    url, store = gateway
    shared, shared_async = client(), async_client()
    assert str(shared.base_url).rstrip("/") == f"{url}/v1"

    def ask(text):
        return shared.chat.completions.with_raw_response.create(
            model="policy", messages=[{"role": "user", "content": text}]).headers["x-agentr1-session"]

    @rollout
    async def async_agent(text):
        reply = await shared_async.chat.completions.create(model="policy", messages=[{"role": "user", "content": text}])
        assert reply.choices[0].message.content == f"echo: {text}"
        return current_session().id

    with session() as one:
        assert ask("first") == one.id
    with session() as two:
        assert ask("second") == two.id
    three = asyncio.run(async_agent("third"))
    outside = ask("no session")  # joins an auto session
    assert len({one.id, two.id, three, outside}) == 4
    assert store.get_session(outside).metadata.get("auto") is True
    for sid, text in ((one.id, "first"), (two.id, "second"), (three, "third")):
        assert [st.messages_sent[-1]["content"] for st in store.get_session(sid).steps] == [text]


def test_client_made_inside_a_session_is_bound_to_it(gateway):
    _, store = gateway
    with session() as active:
        bound = client(max_retries=0)  # the SDK retries a 409 by default
        assert str(bound.base_url).rstrip("/") == active.base_url and bound.api_key == active.api_key
        bound.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
    assert len(store.get_session(active.id).steps) == 1
    with pytest.raises(openai.ConflictError, match="finished"):  # bound to a session that has ended
        bound.chat.completions.create(model="policy", messages=[{"role": "user", "content": "late"}])


def test_reward_last_after_a_streamed_call_names_the_streamed_step(gateway):
    """A stream's headers leave before its step exists: reward(step="last") asks the gateway instead."""
    from agentr1.sdk import areward, reward

    _, store = gateway
    history = [{"role": "user", "content": "one"}]

    with session() as active:
        llm = client()
        history.append(llm.chat.completions.create(model="policy", messages=history).choices[0].message.model_dump(
            exclude_none=True))
        reward(0.25, name="plain", step="last")
        history.append({"role": "user", "content": "two"})
        text = "".join(c.choices[0].delta.content or "" for c in llm.chat.completions.create(
            model="policy", messages=history, stream=True) if c.choices)
        assert text == "echo: two"
        reward(1.0, name="streamed", step="last")

        async def async_stream():
            stream = await async_client().chat.completions.create(
                model="policy", messages=[*history, {"role": "assistant", "content": text},
                                          {"role": "user", "content": "three"}], stream=True)
            async for _ in stream:
                pass
            await areward(2.0, name="streamed-async", step="last")

        asyncio.run(async_stream())
    rewards = {r.name: r.step_index for r in store.get_session(active.id).rewards}
    assert rewards == {"plain": 0, "streamed": 1, "streamed-async": 2}


def test_localhost_and_127_0_0_1_are_the_same_gateway(gateway):
    from agentr1.sdk import configure

    url, _ = gateway
    plain = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-anything")  # the agent says 127.0.0.1 ...
    configure(url.replace("127.0.0.1", "localhost"))  # ... the SDK was told localhost
    try:
        with session() as active:
            reply = plain.chat.completions.with_raw_response.create(
                model="policy", messages=[{"role": "user", "content": "hi"}])
            assert reply.headers["x-agentr1-session"] == active.id
    finally:
        configure(url)
