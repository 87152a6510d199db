"""What the official ``openai`` client sees of the three conformance gaps of issue 59, against a real gateway
(uvicorn, SQLite) on the embedded engine with a tiny random Llama (SmolLM2's tokenizer and tool template) whose
context is cut to 640 tokens: no max_tokens runs to the context limit (not 512); a forced call cut by max_tokens is a
tool call with the arguments written so far, whole and streamed; echo with logprobs scores the prompt's tokens."""

from __future__ import annotations

import json

import openai
import pytest
from gateway_harness import serve

from agentr1.core.rendering import load_renderer
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend

CONTEXT = 640
TOOL = {"type": "function", "function": {"name": "calculator", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string", "maxLength": 24}}, "required": ["expression"]}}}
ASK = [{"role": "user", "content": "what is 12*7?"}]


@pytest.fixture(scope="module")
def gateway(tiny_model_path, tmp_path_factory):
    backend = LocalBackend(tiny_model_path, EngineOptions(device="cpu", dtype="float32", max_context=CONTEXT),
                           model_name="policy")
    with serve(tmp_path_factory.mktemp("gaps") / "g.db", backend=backend, renderer=load_renderer(tiny_model_path),
               accept_any_model=True) as (url, store):
        yield url, store


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway[0]}/v1", api_key="x", max_retries=0)


def test_without_max_tokens_a_call_runs_to_the_context_limit_not_512(client):
    chat = client.chat.completions.create(model="policy", messages=ASK, temperature=0)  # the random model never ends
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage.completion_tokens > 512
    assert chat.usage.prompt_tokens + chat.usage.completion_tokens == CONTEXT
    text = client.completions.create(model="policy", prompt="Once upon a time", temperature=0)
    assert text.choices[0].finish_reason == "length"
    assert text.usage.prompt_tokens + text.usage.completion_tokens == CONTEXT
    with pytest.raises(openai.BadRequestError, match="maximum context length"):  # a limit asked for is still checked
        client.chat.completions.create(model="policy", messages=ASK, max_tokens=CONTEXT)
