"""LiteLLMBackend (an external model: teacher, judge, baseline) through the real litellm and its
``openai/`` provider, against an in-process server that follows OpenAI's chat-completions protocol."""

from __future__ import annotations

import json
from typing import Any

import pytest
from backend_helpers import request, run, served
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentr1.core.generation import BackendError, BackendUnavailable, SamplingParams
from agentr1.gateway.backends import ChatGeneration, check_backend
from agentr1.gateway.backends.base import Backend
from agentr1.gateway.backends.litellm_backend import LiteLLMBackend

pytestmark = pytest.mark.filterwarnings("ignore:Items? .* using the `ReadOnly` qualifier:UserWarning")

TOOL = {"type": "function", "function": {"name": "calculator", "description": "arithmetic",
                                          "parameters": {"type": "object",
                                                         "properties": {"expression": {"type": "string"}}}}}


def openai_server() -> FastAPI:
    """POST /v1/chat/completions as OpenAI answers it: a tool call when tools are offered, else an
    echo; ``n`` choices; logprobs on request; errors in OpenAI's shape from ``app.state.fail_next``."""
    app = FastAPI()
    app.state.requests, app.state.fail_next = [], []

    @app.post("/v1/chat/completions")
    async def chat(req: Request) -> Any:
        body = await req.json()
        app.state.requests.append(body)
        if app.state.fail_next:
            status, message = app.state.fail_next.pop(0)
            kind = "invalid_request_error" if status < 500 else "server_error"
            return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": None}},
                                status_code=status)
        choices = []
        for i in range(body.get("n") or 1):
            if body.get("tools"):
                call = {"id": f"call_{i}", "type": "function",
                        "function": {"name": "calculator", "arguments": json.dumps({"expression": "12*7"})}}
                message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
            else:
                last = body["messages"][-1]["content"]
                message, finish = {"role": "assistant", "content": f"echo {i}: {last}"}, "stop"
            logprobs = None
            if body.get("logprobs"):
                logprobs = {"content": [{"token": t, "logprob": -0.25 * (k + 1), "bytes": None, "top_logprobs": []}
                                        for k, t in enumerate(["echo", " 0"])]}
            choices.append({"index": i, "message": message, "finish_reason": finish, "logprobs": logprobs})
        return {"id": "chatcmpl-test", "object": "chat.completion", "created": 1700000000, "model": body["model"],
                "choices": choices, "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}}

    return app


@pytest.fixture(scope="module")
def teacher():
    app = openai_server()
    with served_chat(app) as url:
        yield url, app.state


def served_chat(app: FastAPI) -> Any:
    app.get("/health")(lambda: {"status": "ok"})
    return served(app)


def test_chat_text_tools_and_logprobs_through_litellm(teacher):
    url, state = teacher
    backend = LiteLLMBackend("openai/teacher-model", model_name="teacher", api_base=f"{url}/v1", api_key="sk-test",
                             retries=0)
    assert isinstance(backend, Backend) and isinstance(backend, ChatGeneration) and backend.trainable is False
    assert check_backend(backend).chat is backend

    async def body() -> None:
        await backend.start()
        assert await backend.ready() and backend.policy_version == 0
        sampling = SamplingParams(max_new_tokens=32, temperature=0.3, top_p=0.9, stop=["\n\n"], seed=7,
                                  top_logprobs=2)
        [answer] = await backend.generate_chat([{"role": "user", "content": "What is 12*7?"}], sampling=sampling)
        assert answer.message == {"role": "assistant", "content": "echo 0: What is 12*7?"}
        assert (answer.finish_reason, answer.prompt_tokens, answer.completion_tokens) == ("stop", 11, 4)
        assert answer.logprobs == [-0.25, -0.5] and answer.model.endswith("teacher-model")
        calls = await backend.generate_chat([{"role": "user", "content": "12*7?"}], tools=[TOOL],
                                            tool_choice="auto", sampling=SamplingParams(), n=2)
        assert [c.finish_reason for c in calls] == ["tool_calls", "tool_calls"]
        assert calls[1].message["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
            "name": "calculator", "arguments": '{"expression": "12*7"}'}}]

    run(body())
    sent = state.requests[0]
    assert sent["model"] == "teacher-model" and sent["messages"] == [{"role": "user", "content": "What is 12*7?"}]
    assert {k: sent[k] for k in ("temperature", "top_p", "max_tokens", "stop", "seed", "logprobs", "top_logprobs")} \
        == {"temperature": 0.3, "top_p": 0.9, "max_tokens": 32, "stop": ["\n\n"], "seed": 7, "logprobs": True,
            "top_logprobs": 2}
    assert state.requests[1]["tools"] == [TOOL] and state.requests[1]["n"] == 2


def test_provider_errors_and_the_token_id_protocol(teacher):
    url, state = teacher
    backend = LiteLLMBackend("openai/teacher-model", api_base=f"{url}/v1", api_key="sk-test", retries=0,
                             extra={"max_retries": 0})

    async def body() -> None:
        messages = [{"role": "user", "content": "hi"}]
        state.fail_next[:] = [(400, "This model's maximum context length is 8 tokens")]
        with pytest.raises(BackendError, match="maximum context length") as bad:
            await backend.generate_chat(messages, sampling=SamplingParams())
        assert bad.value.status_code == 400 and not isinstance(bad.value, BackendUnavailable)
        state.fail_next[:] = [(503, "overloaded")] * 3
        with pytest.raises(BackendUnavailable) as busy:
            await backend.generate_chat(messages, sampling=SamplingParams())
        assert busy.value.retry_after
        state.fail_next.clear()
        with pytest.raises(BackendError, match="generate_chat") as refused:
            await backend.generate(request([1, 2, 3]))
        assert refused.value.status_code == 400
        with pytest.raises(BackendError):
            backend.stream(request([1, 2, 3]))
        with pytest.raises(ValueError, match="no weights"):
            await backend.update_weights("/tmp/anything")

    run(body())
