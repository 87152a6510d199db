"""SessionBatches against a real gateway: a burst of sessions opens in one request and ends in few, each
session's calls are its own, and the errors of one session stay that session's."""

from __future__ import annotations

import asyncio

import pytest

from agentr1.sdk import (
    GatewayUnreachable,
    SessionAlreadyFinished,
    SessionBatches,
    async_openai_client,
    configure,
    current_session,
    session,
)
from agentr1.sdk import batches as batches_module


@pytest.fixture()
def requests_sent(monkeypatch):
    """The (method, path, number of sessions) of every request SessionBatches sends, sent for real."""
    sent: list[tuple[str, str, int]] = []
    real = batches_module.arequest

    async def counting(method, path, session=None, json=None, url=None):
        sent.append((method, path, len(json)))
        return await real(method, path, session, json=json, url=url)

    monkeypatch.setattr(batches_module, "arequest", counting)
    return sent


async def _agent(batches: SessionBatches, i: int) -> str:
    active = await batches.open(run_id="batches", task_id=f"t{i}", group_id="g", metadata={"sample": i})
    async with session(active=active):
        assert current_session() is active
        client = async_openai_client()
        reply = await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": f"q{i}"}])
        assert reply.choices[0].message.content == f"echo: q{i}"
    assert current_session() is None
    await asyncio.sleep(0.001 * (i % 7))  # the agents end at different moments
    await batches.finish(active, reward=float(i))
    return active.id


def test_a_burst_of_sessions_opens_in_one_request_and_ends_in_few(gateway, requests_sent):
    _, store = gateway

    async def main() -> list[str]:
        batches = SessionBatches()
        return await asyncio.gather(*(_agent(batches, i) for i in range(40)))

    ids = asyncio.run(main())
    opens = [n for method, path, n in requests_sent if path == "/sessions"]
    ends = [n for method, path, n in requests_sent if path == "/sessions/finish"]
    assert opens == [40]  # all asked at the same moment: one request, one transaction
    assert sum(ends) == 40 and len(ends) < 20, ends
    for i, sid in enumerate(ids):
        record = store.get_session(sid)
        assert (record.status, record.reward, record.task_id, record.metadata) == ("finished", float(i), f"t{i}",
                                                                                   {"sample": i})
        assert [step.messages_sent[-1]["content"] for step in record.steps] == [f"q{i}"]  # its own call only


def test_a_session_run_with_active_is_neither_opened_nor_ended_there(gateway, requests_sent):
    _, store = gateway

    async def main() -> None:
        batches = SessionBatches()
        active = await batches.open(task_id="kept-open")
        with pytest.raises(ValueError):
            async with session(active=active):
                raise ValueError("the agent's own error")
        assert store.get_session(active.id).status == "running"  # whoever opened it ends it
        with session(active=active):  # sync too
            assert current_session() is active
        await batches.finish(active, "failed", error="agent: by hand")

        assert store.get_session(active.id).error == "agent: by hand"

    asyncio.run(main())
    assert [path for _, path, _ in requests_sent] == ["/sessions", "/sessions/finish"]


def test_ending_a_session_twice_fails_that_one_alone(gateway, requests_sent):
    _, store = gateway

    async def main() -> list[object]:
        batches = SessionBatches()
        done, a, b = await asyncio.gather(*(batches.open(task_id=f"e{i}") for i in range(3)))
        await batches.finish(done, reward=1.0)
        results = await asyncio.gather(batches.finish(a), batches.finish(done, reward=2.0), batches.finish(b),
                                       return_exceptions=True)
        return [done, a, b, *results]

    done, a, b, *results = asyncio.run(main())
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], SessionAlreadyFinished) and results[1].status == 409
    assert [n for _, path, n in requests_sent if path == "/sessions/finish"] == [1, 3]  # the three in one request
    assert store.get_session(done.id).reward == 1.0  # the refused end added nothing
    assert {store.get_session(s.id).status for s in (a, b)} == {"finished"}


def test_a_gateway_that_cannot_be_reached_fails_every_session_of_the_batch(gateway):
    url, _ = gateway

    async def main() -> list[object]:
        batches = SessionBatches()
        return await asyncio.gather(*(batches.open(task_id=f"u{i}") for i in range(5)), return_exceptions=True)

    configure("http://127.0.0.1:9")  # nothing listens there
    try:
        results = asyncio.run(main())
    finally:
        configure(url)
    assert len(results) == 5 and all(isinstance(r, GatewayUnreachable) for r in results)


def test_batches_for_a_named_gateway_open_and_end_there_whatever_is_configured(gateway):
    """``SessionBatches(gateway_url=...)`` (the trainer's shards): the sessions are opened at that gateway, carry its
    URL, and end there, while the SDK is configured with another address."""
    url, store = gateway

    async def main() -> list[str]:
        batches = SessionBatches(gateway_url=url)
        return await asyncio.gather(*(_agent(batches, i) for i in range(6)))

    configure("http://127.0.0.1:9")  # nothing listens there
    try:
        ids = asyncio.run(main())
    finally:
        configure(url)
    assert [store.get_session(sid).status for sid in ids] == ["finished"] * 6


def test_an_answer_that_does_not_match_the_list_fails_its_sessions_instead_of_hanging(gateway):
    """A server that answers POST /sessions with fewer sessions than the list asked for (not this gateway: a
    broken proxy, say): every session of that request fails with an error that says so."""
    from fastapi import FastAPI

    from agentr1.gateway.server import BackgroundServer

    url, _ = gateway
    app = FastAPI()

    @app.post("/sessions", status_code=201)
    async def one_only(body: list[dict]) -> list[dict]:
        return [{"id": "s0", "base_url": "http://x/sessions/s0/v1", "api_key": "a1s-x"}]

    @app.get("/ready")
    async def ready() -> dict:
        return {}

    async def main() -> list[object]:
        batches = SessionBatches()
        return await asyncio.wait_for(asyncio.gather(*(batches.open(task_id=f"m{i}") for i in range(3)),
                                                     return_exceptions=True), 30)

    with BackgroundServer(app) as broken:
        configure(broken)
        try:
            results = asyncio.run(main())
        finally:
            configure(url)
    assert len(results) == 3 and all(isinstance(r, RuntimeError) and "1 results for 3" in str(r) for r in results)
