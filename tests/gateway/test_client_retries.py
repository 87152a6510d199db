"""Client retries leave no ghost steps: the real openai client times out, re-sends, and the gateway
records both attempts, marks the retry's ``retry_of`` (the unseen first answer is ``superseded_by`` it),
continues the next turn from the retry without drift, and the batch builder trains only on the
trajectory the agent followed. The backend is the instant (scripted) one, so the test controls timing."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest
from gateway_harness import serve

from agentr1.core.rendering import load_renderer
from agentr1.gateway.backends.instant import InstantBackend
from agentr1.trainer.batch import BatchConfig, build_rows

CLIENT_TIMEOUT_S = 0.1


@pytest.fixture(scope="module")
def renderer(smollm2_path):
    return load_renderer(smollm2_path)


class _SlowSecondCall(InstantBackend):
    """Answers at once, except that generation number 2 (the call that will time out client-side) takes
    ``hold_s``, and generation number 3 (its retry) waits until ``ready()`` says so."""

    def __init__(self, tokenizer, *, hold_s: float, retry_waits_for=lambda: True):
        super().__init__(tokenizer, lambda ids: f"answer {self.calls}", model_name="policy", max_context=2048)
        self.hold_s = hold_s
        self.retry_waits_for = retry_waits_for

    async def generate(self, request):
        number = self.calls + 1
        if number == 2:
            await asyncio.sleep(self.hold_s)
        if number == 3:
            await _until(self.retry_waits_for)
        return await super().generate(request)


async def _until(condition, limit_s: float = 10.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting in the test backend"
        await asyncio.sleep(0.01)


def _wait(condition, limit_s: float = 10.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting in the test"
        time.sleep(0.01)


def _three_turns(url: str, store, *, hold_s: float, retry_after_store: bool):
    """Turn 1 answered; turn 2 times out once and is retried by the client; turn 3 continues the answer."""
    session = httpx.post(f"{url}/sessions", json={}).json()
    sid = session["id"]

    def first_answer_stored() -> bool:
        return store.get_session(sid).n_steps >= 2

    def hold_retries(request: httpx.Request) -> None:
        if request.headers.get("x-stainless-retry-count", "0") != "0":
            request.extensions["timeout"] = httpx.Timeout(10.0).as_dict()  # only the first attempt times out
            if retry_after_store:  # the retry leaves only once attempt 1 is stored
                _wait(first_answer_stored)

    http = httpx.Client(event_hooks={"request": [hold_retries]})
    client = openai.OpenAI(base_url=session["base_url"], api_key="unused", timeout=CLIENT_TIMEOUT_S,
                           max_retries=2, http_client=http)
    messages = [{"role": "user", "content": "hi"}]
    for turn in range(3):
        timeout = CLIENT_TIMEOUT_S if turn == 1 else 10.0
        reply = client.with_options(timeout=timeout).chat.completions.create(model="policy", messages=messages)
        messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                     {"role": "user", "content": f"next {turn}"}]
    _wait(first_answer_stored)
    httpx.post(f"{url}/sessions/{sid}/finish", json={}).raise_for_status()
    return sid, messages


@pytest.mark.parametrize("retry_after_store", [True, False], ids=["first-stored-before-retry", "retry-while-in-flight"])
def test_timed_out_attempt_is_superseded_by_the_retry(tmp_path, renderer, retry_after_store):
    holder: dict = {}
    backend = _SlowSecondCall(renderer.tokenizer, hold_s=0.3 if retry_after_store else 1.0,
                              retry_waits_for=lambda: holder["stored"]())
    with serve(tmp_path / "r.db", backend=backend, renderer=renderer, model="policy") as (url, store):
        holder["stored"] = lambda: any(s.n_steps >= 2 for s in store.list_sessions())
        sid, messages = _three_turns(url, store, hold_s=backend.hold_s, retry_after_store=retry_after_store)
        session = store.get_session(sid)

    steps = {s.index: s for s in session.steps}
    assert sorted(steps) == [0, 1, 2, 3]  # both attempts are in the trace
    first, retry, after = steps[1], steps[2], steps[3]
    assert first.action["content"] == "answer 2" and retry.action["content"] == "answer 3"
    assert messages[3]["content"] == "answer 3"  # the client saw the retry's answer, never the first
    assert retry.retry_of == [1] and first.superseded_by == 2 and after.superseded_by is None
    assert first.parent_index == retry.parent_index == 0
    assert first.observation_ids == retry.observation_ids
    assert not any(s.drift for s in session.steps)
    assert after.parent_index == 2  # the next turn continues the retry's answer, token for token
    assert after.observation_ids[: len(retry.observation_ids) + len(retry.action_ids)] == [
        *retry.observation_ids, *retry.action_ids]

    per_step = build_rows([session], BatchConfig(layout="per_step"))
    assert [r.segments[0].step_index for r in per_step.rows] == [0, 2, 3]
    assert per_step.metrics["superseded_steps"] == 1
    merged = build_rows([session], BatchConfig(layout="merged"))
    assert [[seg.step_index for seg in r.segments] for r in merged.rows] == [[0, 2, 3]]  # one unbroken row


def test_identical_requests_without_retry_evidence(tmp_path, renderer):
    """A Stainless client saying "first attempt" (retry count 0) twice is sampling twice on purpose: both
    answers are siblings of one parent and the agent may continue either. The same request with no header
    at all is taken for a retry by content (a client we cannot ask), so the earlier answer is superseded."""
    backend = InstantBackend(renderer.tokenizer, lambda ids: f"sample {backend.calls}", model_name="policy",
                             max_context=2048)
    with serve(tmp_path / "s.db", backend=backend, renderer=renderer, model="policy") as (url, store):
        session = httpx.post(f"{url}/sessions", json={}).json()
        client = openai.OpenAI(base_url=session["base_url"], api_key="unused", max_retries=0)
        question = [{"role": "user", "content": "pick one"}]
        a, b = (client.chat.completions.create(model="policy", messages=question) for _ in range(2))
        chosen = a.choices[0].message.content  # the agent continues the first sample, not the latest
        client.chat.completions.create(model="policy", messages=[
            *question, {"role": "assistant", "content": chosen}, {"role": "user", "content": "why?"}])
        raw = {"model": "policy", "messages": [*question, {"role": "assistant", "content": chosen},
                                               {"role": "user", "content": "why?"}]}
        httpx.post(f"{session['base_url']}/chat/completions", json=raw).raise_for_status()  # no header
        httpx.post(f"{url}/sessions/{session['id']}/finish", json={}).raise_for_status()
        steps = store.get_session(session["id"]).steps

    assert [s.action["content"] for s in steps] == ["sample 1", "sample 2", "sample 3", "sample 4"]
    assert [s.parent_index for s in steps] == [None, None, 0, 0]
    assert [s.retry_of for s in steps] == [None, None, None, [2]]
    assert [s.superseded_by for s in steps] == [None, None, 3, None]
    assert not any(s.drift for s in steps)
    assert b.choices[0].message.content == "sample 2"
