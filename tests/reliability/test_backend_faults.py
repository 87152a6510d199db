"""Backend faults seen through the gateway: the SGLang server refuses connections, hangs, answers
garbage or dies mid-answer. For each: what the agent (the real openai client) sees, and that the
store holds no step for the unanswered call, so the session continues at the same index, with no
gap and no drift, once the backend is healthy again."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import openai
import pytest
from faulty_sglang import REPLY, FaultState, faulty_sglang_app

from agentr1.core.rendering import load_renderer
from agentr1.gateway.app import create_app
from agentr1.gateway.backends.sglang import SGLangBackend
from agentr1.gateway.server import BackgroundServer, free_port
from agentr1.gateway.settings import GatewaySettings
from agentr1.store import TraceStore


@pytest.fixture(scope="module")
def renderer(tiny_model_path):
    return load_renderer(tiny_model_path)


@pytest.fixture(scope="module")
def fault_state(renderer):
    tok = renderer.tokenizer
    return FaultState(reply_ids=tok.encode(REPLY, add_special_tokens=False),
                      end_id=tok.convert_tokens_to_ids("<|im_end|>"))


@contextmanager
def faulty_server(state: FaultState, port: int | None = None) -> Iterator[str]:
    with BackgroundServer(faulty_sglang_app(state), port=port, ready_path="/health") as url:
        yield url


@contextmanager
def gateway(db, backend_url: str, renderer, tiny_model_path) -> Iterator[tuple[str, TraceStore]]:
    """A real gateway whose SGLang backend gives up quickly: 1 s timeout, one retry."""
    backend = SGLangBackend([backend_url], model_name="faulty", max_context=2048, tokenizer=str(tiny_model_path),
                            timeout=1.0, retries=1, backoff_s=0.05)
    store = TraceStore.open(f"sqlite:///{db}")
    app = create_app(GatewaySettings(model="faulty", db=f"sqlite:///{db}", accept_any_model=True), store=store,
                     backend=backend, renderer=renderer)
    try:
        with BackgroundServer(app, ready_path="/health") as url:
            yield url, store
    finally:
        store.close()


def new_session(url: str) -> tuple[str, openai.OpenAI]:
    import httpx

    created = httpx.post(f"{url}/sessions", json={"task_id": "fault"}).json()
    return created["id"], openai.OpenAI(base_url=created["base_url"], api_key=created["api_key"], max_retries=0,
                                        timeout=30)


MESSAGES = [{"role": "user", "content": "what is 2+2?"}]


def assert_continues_cleanly(client: openai.OpenAI, store: TraceStore, session_id: str) -> None:
    """The failed call left nothing behind: the retried call is step 0, and the next turn continues it."""
    assert store.get_session(session_id).steps == []
    first = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=8)  # type: ignore[arg-type]
    assert first.choices[0].message.content == REPLY
    second = client.chat.completions.create(model="m", max_tokens=8, messages=[  # type: ignore[arg-type]
        *MESSAGES, {"role": "assistant", "content": REPLY}, {"role": "user", "content": "sure?"}])
    assert (first.model_extra or {})["agentr1"]["steps"] == [0]
    assert (second.model_extra or {})["agentr1"]["steps"] == [1]
    steps = store.get_session(session_id).steps
    assert [s.index for s in steps] == [0, 1]
    assert steps[1].parent_index == 0 and not steps[1].drift and steps[0].feedback_messages is not None


def test_connection_refused_is_a_503_with_retry_after_and_the_retry_succeeds(tmp_path, renderer, fault_state,
                                                                              tiny_model_path):
    port = free_port()  # nothing listens here yet
    with gateway(tmp_path / "t.db", f"http://127.0.0.1:{port}", renderer, tiny_model_path) as (url, store):
        sid, client = new_session(url)
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=8)  # type: ignore[arg-type]
        assert refused.value.status_code == 503
        assert refused.value.response.headers["retry-after"]
        assert refused.value.body["code"] == "backend_error" and "unreachable" in refused.value.body["message"]
        fault_state.mode = "ok"
        with faulty_server(fault_state, port=port):  # the server comes (back) up on its address
            assert_continues_cleanly(client, store, sid)


@pytest.mark.parametrize(("mode", "status", "says"), [
    ("hang", 504, "did not answer within 1 s"),
    ("garbage", 502, "malformed answer"),
    ("wrong_shape", 502, "malformed answer"),
    ("die", 503, "unreachable"),
])
def test_a_misbehaving_backend_is_a_clear_error_and_leaves_no_step(mode, status, says, tmp_path, renderer,
                                                                   fault_state, tiny_model_path):
    fault_state.mode = mode
    with faulty_server(fault_state) as backend_url, \
            gateway(tmp_path / "t.db", backend_url, renderer, tiny_model_path) as (url, store):
        sid, client = new_session(url)
        with pytest.raises(openai.APIStatusError) as failed:
            client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=8)  # type: ignore[arg-type]
        assert failed.value.status_code == status
        assert failed.value.body["code"] == "backend_error" and says in failed.value.body["message"]
        assert set(failed.value.body) == {"message", "type", "param", "code"}
        fault_state.mode = "ok"
        assert_continues_cleanly(client, store, sid)


@pytest.mark.parametrize(("mode", "says"), [("die", "unreachable"), ("garbage", "ended the stream before the generation finished")])
def test_a_stream_that_dies_midway_ends_with_an_error_and_stores_nothing(mode, says, tmp_path, renderer, fault_state,
                                                                         tiny_model_path):
    fault_state.mode = mode
    with faulty_server(fault_state) as backend_url, \
            gateway(tmp_path / "t.db", backend_url, renderer, tiny_model_path) as (url, store):
        sid, client = new_session(url)
        chunks = []
        with pytest.raises(openai.APIError) as failed:  # the openai client raises on the in-band error event
            for chunk in client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=8,  # type: ignore[arg-type]
                                                        stream=True):
                chunks.append(chunk)
        assert says in failed.value.message
        assert failed.value.code == "backend_error"
        assert not any(c.choices and c.choices[0].finish_reason for c in chunks)  # never claimed to be done
        fault_state.mode = "ok"
        assert_continues_cleanly(client, store, sid)
