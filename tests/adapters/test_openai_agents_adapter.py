"""agentr1.adapters.openai_agents and the OpenAI Agents SDK example agent against a real gateway."""

from __future__ import annotations

import asyncio

import pytest
from adapter_checks import exact_steps, load_example, new_run, run_sessions
from agents import Agent, Runner, function_tool, trace
from agents.tracing.traces import NoOpTrace

from agentr1.adapters.openai_agents import model
from agentr1.sdk import current_session, rollout


@pytest.fixture(scope="module")
def example():
    return load_example("openai_agents_sdk_agent")


def test_example_agent_with_function_tool_records_exact_two_step_sessions(gateway, example):
    url, store = gateway
    run_id = new_run()
    assert example.main([url, "--limit", "2", "--run-id", run_id]) == {"mul-12-7": 1.0, "add-35-48": 1.0}
    sessions = run_sessions(store, run_id)
    assert sorted(s.task_id for s in sessions) == ["add-35-48", "mul-12-7"]
    for s in sessions:
        assert s.status == "finished" and s.reward == 1.0
        call, _ = exact_steps(store, s.id, 2)
        assert call.messages_seen[0] == {"role": "system", "content": example.INSTRUCTIONS}
        assert call.sampling["endpoint"] == "responses"  # the SDK's default API, not forced to Chat Completions
        assert [t["function"]["name"] for t in call.tools] == ["calculator"]
    assert isinstance(trace("probe"), NoOpTrace)  # use_gateway() turned the export of traces to OpenAI off


def test_model_bound_to_the_rollout_session(gateway):
    _, store = gateway

    @function_tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        return str(eval(expression, {"__builtins__": {}}, {}))

    @rollout
    async def solve(question: str):
        agent = Agent(name="calc", instructions="Use the calculator.", tools=[calculator], model=model("policy"))
        result = await Runner.run(agent, question)
        return result.final_output, current_session().id

    (answer, sid), (answer2, sid2) = asyncio.run(_both(solve))
    assert (answer, answer2) == ("The answer is 91.", "The answer is 20.")
    assert sid != sid2
    for s in (sid, sid2):
        exact_steps(store, s, 2)


async def _both(solve):  # two agents at once, each in its own session
    return await asyncio.gather(solve("What is 13*7?"), solve("What is 4*5?"))
