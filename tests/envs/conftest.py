"""A real gateway (uvicorn, SmolLM2's tokenizer and renderer, an instant backend answering from a
script) for the environment-layer tests, plus helpers to script hermes-style tool calls."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest


def tool_call(name: str, **arguments: object) -> str:
    """The text SmolLM2's hermes template uses for one tool call."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def tool_results_seen(prompt: str) -> int:
    """How many tool results the rendered prompt already holds."""
    return prompt.count("<tool_response>")


@pytest.fixture
def gateway(tmp_path, scripted_gateway) -> Callable:
    """``with gateway(reply) as (url, store)``: a fresh gateway and trace store for one test."""

    def serve(reply: Callable[[str], str], db: str = "envs.db"):
        return scripted_gateway(tmp_path / db, reply)

    return serve
