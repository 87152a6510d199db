"""BaseTool and run_tool_calls without a model: schemas, concurrency, and bad calls turned into
feedback the model can read instead of crashes."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from agentr1.envs import BaseTool, ToolResult, run_tool_calls


class Sleep(BaseTool):
    name = "sleep"
    description = "Wait, then say how long."
    parameters = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}

    async def execute(self, arguments):
        await asyncio.sleep(arguments["seconds"])
        return ToolResult(content=f"slept {arguments['seconds']}", reward=0.5, info={"seconds": arguments["seconds"]})


class Broken(BaseTool):
    name = "broken"
    description = "Always fails."

    async def execute(self, arguments):
        raise RuntimeError("disk on fire")


class WrongReturn(BaseTool):
    name = "wrong"
    description = "Returns a string instead of a ToolResult."

    async def execute(self, arguments):
        return "not a ToolResult"


def call(name, arguments, call_id="c0"):
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def test_schema_is_the_openai_tools_entry():
    assert Sleep().schema() == {"type": "function", "function": {
        "name": "sleep", "description": "Wait, then say how long.", "parameters": Sleep.parameters}}


def test_tool_calls_of_one_turn_run_concurrently():
    calls = [call("sleep", {"seconds": 0.3}, f"c{i}") for i in range(4)]
    started = time.perf_counter()
    outcomes = asyncio.run(run_tool_calls(calls, [Sleep()]))
    elapsed = time.perf_counter() - started
    assert elapsed < 0.6, f"4 x 0.3 s tools took {elapsed:.2f} s: they ran one after another"
    assert [o.message["tool_call_id"] for o in outcomes] == ["c0", "c1", "c2", "c3"]
    assert all(o.result.reward == 0.5 and o.error is None for o in outcomes)


@pytest.mark.parametrize(("bad_call", "expected"), [
    (call("nope", {}), "unknown tool 'nope'; available tools: ['broken', 'sleep']"),
    (call("sleep", "{not json"), "arguments of sleep are not valid JSON"),
    (call("sleep", [1, 2]), "arguments must be a JSON object, got list"),
    (call("sleep", {}), "missing required argument(s) ['seconds']"),
    (call("broken", {}), "broken failed: RuntimeError: disk on fire"),
])
def test_bad_calls_become_error_feedback_for_the_model(bad_call, expected):
    [outcome] = asyncio.run(run_tool_calls([bad_call], [Sleep(), Broken()]))
    assert expected in outcome.error
    assert outcome.message == {"role": "tool", "tool_call_id": "c0", "content": f"error: {outcome.error}"}
    assert outcome.result.reward is None


def test_a_tool_that_breaks_its_contract_is_a_programming_error():
    with pytest.raises(TypeError, match=r"WrongReturn\.execute must return a ToolResult"):
        asyncio.run(run_tool_calls([call("wrong", {})], [WrongReturn()]))
