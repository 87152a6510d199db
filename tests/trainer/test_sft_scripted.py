"""Text turns -> the policy's ids (assistant_turn_ids) and the scripted backend's refusals."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentr1.core.generation import BackendError, GenerateRequest, SamplingParams
from agentr1.core.rendering import RenderError, load_renderer
from agentr1.core.rendering.turns import assistant_turn_ids
from agentr1.gateway.backends.scripted import ScriptedBackend

CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c0", "type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": "2*3"})}}]}


@pytest.fixture(scope="module")
def renderer(tiny_model_path):
    return load_renderer(tiny_model_path)


def test_a_turn_is_what_follows_the_generation_prompt(renderer):
    history = [{"role": "user", "content": "What is 2*3?"}]
    ids = assistant_turn_ids(renderer, CALL, history)
    text = renderer.tokenizer.decode(ids)
    assert text == '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2*3"}}\n</tool_call><|im_end|>'
    assert renderer.parse(ids).tool_calls[0]["function"]["arguments"] == '{"expression": "2*3"}'
    assert assistant_turn_ids(renderer, CALL) == ids  # the turn does not depend on the history
    plain = assistant_turn_ids(renderer, {"role": "assistant", "content": "6"}, history)
    assert renderer.tokenizer.decode(plain) == "6<|im_end|>" and plain[-1] in renderer.end_of_turn_ids
    with pytest.raises(RenderError, match="assistant message"):
        assistant_turn_ids(renderer, {"role": "user", "content": "6"})


def test_scripted_backend_answers_in_order_and_refuses_what_it_cannot(renderer):
    backend = ScriptedBackend(renderer)
    backend.script("s1", [CALL, {"role": "assistant", "content": "6"}])

    def ask(session: str, max_new_tokens: int = 100):
        request = GenerateRequest(prompt_ids=[1, 2, 3], sampling=SamplingParams(max_new_tokens=max_new_tokens),
                                  session_id=session)
        return asyncio.run(backend.generate(request))

    with pytest.raises(BackendError, match="more than max_tokens=3") as too_long:
        ask("s1", max_new_tokens=3)
    assert too_long.value.status_code == 400
    backend.script("s1", [CALL, {"role": "assistant", "content": "6"}])
    first = ask("s1")
    assert first.output_ids == assistant_turn_ids(renderer, CALL) and first.logprobs == [0.0] * len(first.output_ids)
    assert renderer.tokenizer.decode(ask("s1").output_ids) == "6<|im_end|>" and backend.remaining("s1") == 0
    with pytest.raises(BackendError, match="no scripted assistant turn left"):
        ask("s1")
    with pytest.raises(BackendError, match="'other'"):
        ask("other")
