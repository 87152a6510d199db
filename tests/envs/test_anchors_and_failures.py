"""Environment anchors and infrastructure failures through a real gateway (scripted replies):
the calculator environment names its intermediate value as each step's GiGPO anchor, the trainer
reads it back from the trace, and a tool whose server is down ends the episode as an
`environment` failure instead of becoming feedback the model is blamed for."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from examples.calculator.estimators.env import RETRY, CalculatorEnv

from agentr1.envs import AgentEnvLoop, BaseTool, ToolEnv, ToolResult
from agentr1.sdk import anchor_name, failure_kind_of_error, session
from agentr1.trainer.batch import BatchConfig, build_rows, env_anchor
from agentr1.trainer.rewards import assemble_rewards
from conftest import tool_call, tool_results_seen


def calculator_then_answers(prompt: str) -> str:
    """Calls the calculator once, answers 7 (wrong: the task's answer is 8), then 8."""
    if tool_results_seen(prompt) == 0:
        return tool_call("calculator", expression="3 + 4")
    return "The answer is 7." if prompt.count(RETRY) == 0 else "Then it is 8."


def test_the_calculator_names_its_intermediate_value_as_each_steps_anchor(gateway):
    async def go():
        async with session(task_id="t") as active:
            await AgentEnvLoop(CalculatorEnv({"id": "t", "question": "What is 3 + 5?", "answer": 8}),
                               max_steps=6).run()
            return active.id

    with gateway(calculator_then_answers) as (_, store):
        record = store.get_session(asyncio.run(go()))
    assert [s.index for s in record.steps] == [0, 1, 2]
    anchors = [env_anchor(record, s) for s in record.steps]
    assert anchors == ["env:value=none rejected=0", "env:value=7 rejected=0", "env:value=7 rejected=1"]
    assert [s.reward for s in record.steps] == [0.0, 0.0, 1.0]  # anchors add nothing to the rewards
    rows = build_rows([record], BatchConfig(layout="per_step"), rewards=assemble_rewards([record])).rows
    assert [row.anchor_keys for row in rows] == [[a] for a in anchors]


def test_a_reward_and_its_anchor_go_in_one_request_stored_whole_or_not_at_all(gateway):
    from agentr1.sdk import GatewayError, areward, async_openai_client

    async def go():
        async with session(task_id="t") as active:
            client = async_openai_client(max_retries=0)
            await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
            await areward(0.5, name="env", step="last", source="environment", anchor="value=3")
            with pytest.raises(GatewayError, match="404"):  # no step 7: neither the anchor nor the reward
                await areward(1.0, name="env", step=7, source="environment", anchor="value=4")
            with pytest.raises(ValueError, match="belongs to a step"):
                await areward(1.0, anchor="value=5")
            return active.id

    with gateway(lambda prompt: "ok") as (_, store):
        record = store.get_session(asyncio.run(go()))
    assert sorted((r.name, r.value, r.step_index) for r in record.rewards) == [
        ("anchor:value=3", 0.0, 0), ("env", 0.5, 0)]
    assert env_anchor(record, record.steps[0]) == "env:value=3"


def test_long_or_blank_anchor_texts():
    assert anchor_name("  a\n b ") == "anchor:a b"
    long = anchor_name("x" * 500)
    assert long.startswith("anchor:sha1:") and len(long) < 255 and long == anchor_name("x" * 500 + "   ")
    with pytest.raises(ValueError, match="non-empty"):
        anchor_name("  ")


class DownServer(BaseTool):
    name = "search"
    description = "Search the index."
    parameters = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}

    async def execute(self, arguments):
        async with httpx.AsyncClient(timeout=2) as client:  # port 9: nothing listens
            response = await client.get("http://127.0.0.1:9/search", params=arguments)
        return ToolResult(response.text)


def test_a_tool_server_that_is_down_fails_the_episode_as_an_environment_failure(gateway):
    async def go(holder):
        async with session(task_id="t") as active:
            holder.append(active.id)
            await AgentEnvLoop(ToolEnv({"id": "t", "question": "Find it."}, tools=[DownServer()]), max_steps=3).run()

    holder: list[str] = []
    with gateway(lambda prompt: tool_call("search", q="it")) as (_, store):
        with pytest.raises(Exception, match="tool search is unavailable: ConnectError"):
            asyncio.run(go(holder))
        record = store.get_session(holder[0])
    assert record.status == "failed" and failure_kind_of_error(record.error) == "environment"
    assert len(record.steps) == 1  # the episode ended at the failed call; no tool message was made up
