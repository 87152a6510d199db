"""A real gateway for the adapter tests: uvicorn in-process, the instant backend with SmolLM2's real
tokenizer and renderer, a real store. The scripted model is a perfect calculator agent: with tools
offered it calls ``calculator`` on the question's expression (hermes format), once a tool result
is in the prompt it answers with it, and without tools it echoes the last user message."""

from __future__ import annotations

import json
import os
import re

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")



def scripted_reply(text: str) -> str:
    last_user = text.rsplit("<|im_start|>user\n", 1)[-1].split("<|im_end|>", 1)[0]
    results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", last_user, re.S)
    if results:
        return f"The answer is {results[-1]}."
    question = re.search(r"What is ([\d\s+\-*/().]+)\?", last_user)
    if "<tools>" in text and question:
        arguments = json.dumps({"expression": question.group(1).strip()})
        return f'<tool_call>\n{{"name": "calculator", "arguments": {arguments}}}\n</tool_call>'
    return f"echo: {last_user}"


@pytest.fixture(scope="session")
def gateway(tmp_path_factory, scripted_gateway):
    """(url, store) of a gateway shared by all adapter tests; the SDK is configured to use it."""
    with scripted_gateway(tmp_path_factory.mktemp("adapters") / "adapters.db", scripted_reply) as served:
        yield served
