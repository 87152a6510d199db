"""@rollout, session() and reward() against a real gateway, with the real openai client."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from agentr1.sdk import (
    GatewayUnreachable,
    NoActiveSession,
    SessionAlreadyFinished,
    UnknownStep,
    configure,
    current_session,
    reward,
    rollout,
    session,
)
from agentr1.sdk.client import finish_call, request


def ask(url: str, text: str) -> str:
    """An agent's own client, pointed at the gateway's plain /v1: no session in the URL or key."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="not-a-session-key")
    reply = client.chat.completions.create(model="any", messages=[{"role": "user", "content": text}])
    return reply.choices[0].message.content


async def aask(url: str, text: str) -> str:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x")
    r = await client.chat.completions.create(model="any", messages=[{"role": "user", "content": text}])
    return r.choices[0].message.content


def _contents(store, sid):
    return [st.messages_sent[-1]["content"] for st in store.get_session(sid).steps]


def test_sync_rollout_attributes_calls_and_records_the_returned_reward(gateway):
    url, store = gateway
    seen = {}

    @rollout(task_id=lambda task: task["id"], group_id="g", run_id="sdk-run")
    def agent(task):
        seen["sid"] = current_session().id
        assert ask(url, task["q"]) == f"echo: {task['q']}"
        ask(url, "second call")
        return 0.75

    assert agent({"id": "t1", "q": "hello"}) == 0.75
    trace = store.get_session(seen["sid"])
    assert trace.status == "finished" and trace.reward == 0.75 and trace.task_id == "t1"
    assert trace.run_id == "sdk-run" and trace.group_id == "g"
    assert _contents(store, seen["sid"]) == ["hello", "second call"]
    assert current_session() is None


def test_async_rollout_and_raising_agent_leaves_failed_session_with_steps(gateway):
    url, store = gateway
    ids = []

    @rollout
    async def agent(q):
        ids.append(current_session().id)
        await aask(url, q)
        raise ValueError("tool exploded")

    with pytest.raises(ValueError, match="tool exploded"):
        asyncio.run(agent("boom"))
    trace = store.get_session(ids[0])
    assert trace.status == "failed" and "tool exploded" in trace.error
    assert _contents(store, ids[0]) == ["boom"]


def test_nested_and_parallel_sub_agents_belong_to_the_rollout(gateway):
    url, store = gateway

    @rollout
    def sub_agent(q):  # a decorated sub-agent called inside a rollout joins it
        return ask(url, q) and None

    @rollout
    def agent():
        sid = current_session().id
        sub_agent("nested")
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: ask(url, f"pool {i}"), range(4)))
        t = threading.Thread(target=ask, args=(url, "thread"))
        t.start()
        t.join()

        async def fan_out():
            await asyncio.gather(*(aask(url, f"task {i}") for i in range(3)))

        asyncio.run(fan_out())
        return sid

    sid = agent()
    assert sorted(_contents(store, sid)) == sorted(
        ["nested", "pool 0", "pool 1", "pool 2", "pool 3", "thread", "task 0", "task 1", "task 2"])


def test_hundred_concurrent_agents_threads_and_asyncio_never_misattribute(gateway):
    url, store = gateway
    results: dict[str, str] = {}

    @rollout(task_id=lambda marker: marker)
    def thread_agent(marker):
        for turn in range(2):
            ask(url, f"{marker} turn {turn}")
        results[marker] = current_session().id

    @rollout(task_id=lambda marker: marker)
    async def async_agent(marker):
        for turn in range(2):
            await aask(url, f"{marker} turn {turn}")
        results[marker] = current_session().id

    async def asyncio_side():
        await asyncio.gather(*(async_agent(f"async-{i}") for i in range(50)))

    threads = [threading.Thread(target=thread_agent, args=(f"thread-{i}",)) for i in range(50)]
    loop_thread = threading.Thread(target=lambda: asyncio.run(asyncio_side()))
    for t in [*threads, loop_thread]:
        t.start()
    for t in [*threads, loop_thread]:
        t.join()
    assert len(results) == 100
    for marker, sid in results.items():
        assert _contents(store, sid) == [f"{marker} turn 0", f"{marker} turn 1"], marker
        assert store.get_session(sid).task_id == marker


def test_reward_helpers_and_errors(gateway):
    url, store = gateway
    with pytest.raises(NoActiveSession):
        reward(1.0)
    with session(task_id="manual") as s:
        ask(url, "one")
        reward(0.5, step="last", name="format")
        reward(0.25)
        with pytest.raises(UnknownStep):
            reward(1.0, step=9)
    trace = store.get_session(s.id)
    assert trace.steps[0].reward == 0.5 and trace.reward == 0.25 and trace.status == "finished"
    method, path, sess, body = finish_call(s, "finished", None, None)
    with pytest.raises(SessionAlreadyFinished, match="already finished"):
        request(method, path, sess, json=body)


def test_gateway_unreachable_is_a_clear_error(gateway):
    url, _ = gateway
    configure("http://127.0.0.1:1")
    try:
        with pytest.raises(GatewayUnreachable, match="agentr1 gateway"):
            with session():
                pass
    finally:
        configure(url)


def test_headers_only_go_to_the_gateway(gateway):
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.update(request.headers)
        return httpx.Response(200, json={})

    with session():
        with httpx.Client(transport=httpx.MockTransport(handler)) as client:
            client.get("http://example.invalid/x")
    assert "x-agentr1-session" not in seen


def test_rollout_reaches_a_gateway_with_access_control(tmp_path):
    """With an admin key on the gateway, the SDK's session header comes with X-Agentr1-Session-Key, so an agent
    whose own client carries an unrelated API key is still let in, and attributed."""
    from agentr1.core.models import ensure_smollm2
    from agentr1.core.rendering import load_renderer
    from agentr1.gateway.app import create_app
    from agentr1.gateway.backends.instant import InstantBackend
    from agentr1.gateway.server import BackgroundServer
    from agentr1.gateway.settings import AuthSettings, GatewaySettings
    from agentr1.sdk.client import _config
    from agentr1.store import TraceStore

    renderer = load_renderer(ensure_smollm2())
    store = TraceStore.open(str(tmp_path / "locked.db"))
    app = create_app(GatewaySettings(db=str(tmp_path / "locked.db"), accept_any_model=True,
                                     auth=AuthSettings(admin_key="adm", api_key="gw-key")),
                     store=store, backend=InstantBackend(renderer.tokenizer, "ok", model_name="policy"),
                     renderer=renderer)
    saved = dict(_config)
    seen = {}
    try:
        with BackgroundServer(app) as url:
            assert httpx.post(f"{url}/v1/chat/completions", json={  # without the SDK: refused
                "model": "m", "messages": [{"role": "user", "content": "x"}]}).status_code == 401
            configure(url, api_key="gw-key")

            @rollout(task_id="locked")
            def agent():
                seen["sid"] = current_session().id
                assert ask(url, "hello") == "ok"
                return 1.0

            assert agent() == 1.0
            trace = store.get_session(seen["sid"])
            assert trace.status == "finished" and trace.reward == 1.0 and len(trace.steps) == 1
    finally:
        _config.clear()
        _config.update(saved)
        store.close()
