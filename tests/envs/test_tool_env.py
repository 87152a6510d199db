"""ToolEnv driven by AgentEnvLoop through a real gateway: concurrent tools, tool rewards summed into
the step reward and stored on that step, done when the model answers without a tool, max_steps,
and the observations the environment built are exactly what the model saw."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentr1.envs import AgentEnvLoop, BaseTool, ToolEnv, ToolResult
from agentr1.sdk import session
from conftest import tool_call, tool_results_seen

DELAY = 0.4


class Timed(BaseTool):
    """Sleeps, records when it ran, and pays a reward."""

    description = "Wait a moment, then echo the word."
    parameters = {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}
    spans: list[tuple[float, float]] = []

    def __init__(self, name: str, reward: float) -> None:
        self.name, self.reward = name, reward

    async def execute(self, arguments):
        start = time.perf_counter()
        await asyncio.sleep(DELAY)
        Timed.spans.append((start, time.perf_counter()))
        return ToolResult(content=f"{self.name}:{arguments['word']}", reward=self.reward, info={"tool": self.name})


class Recording(ToolEnv):
    """ToolEnv that keeps every observation it handed out, to compare with the stored steps."""

    def build_observation(self):
        observation = super().build_observation()
        self.observations = [*getattr(self, "observations", []), observation]
        return observation


TASK = {"id": "t1", "prompt": [{"role": "system", "content": "Use the tools."},
                               {"role": "user", "content": "Fetch alpha and beta, then answer."}]}


def two_tools_then_answer(prompt: str) -> str:
    if tool_results_seen(prompt) == 0:
        return tool_call("alpha", word="a") + "\n" + tool_call("beta", word="b")
    return "Both fetched. #### 3"


def run_episode(env, **loop_kwargs):
    async def go():
        async with session(task_id=env.task["id"]) as active:
            episode = await AgentEnvLoop(env, **loop_kwargs).run()
        return active.id, episode

    return asyncio.run(go())


def test_tool_turn_then_answer(gateway):
    Timed.spans = []
    env = Recording(TASK, tools=[Timed("alpha", 0.25), Timed("beta", 0.5)])
    with gateway(two_tools_then_answer) as (_, store):
        session_id, episode = run_episode(env, max_steps=5, temperature=0)
        trace = store.get_session(session_id)

    assert (episode.steps, episode.done, episode.rewards) == (2, True, [0.75, 0.0])
    assert episode.total_reward == 0.75 and episode.info == {"answer": "Both fetched. #### 3"}
    # the two tools overlapped in time: concurrent, not one after the other
    (start_a, end_a), (start_b, end_b) = Timed.spans
    assert max(start_a, start_b) < min(end_a, end_b)

    steps = trace.steps
    assert [s.index for s in steps] == [0, 1]
    assert [s.reward for s in steps] == [0.75, 0.0]
    assert {(r.name, r.source, r.step_index) for r in trace.rewards} == {("env", "environment", 0),
                                                                          ("env", "environment", 1)}
    # what the environment built is what the model saw, step by step
    assert [s.messages_seen for s in steps] == env.observations[:2]
    assert steps[0].tools == [t.schema() for t in env.tools]
    assert [m["content"] for m in steps[0].feedback_messages] == ["alpha:a", "beta:b"]
    assert [c["function"]["name"] for c in steps[0].action["tool_calls"]] == ["alpha", "beta"]


def test_max_steps_ends_an_episode_that_never_answers(gateway):
    env = ToolEnv(TASK, tools=[Timed("alpha", 0.0)])
    with gateway(lambda prompt: tool_call("alpha", word=str(tool_results_seen(prompt)))) as (_, store):
        session_id, episode = run_episode(env, max_steps=3)
        assert len(store.get_session(session_id).steps) == 3
    assert (episode.steps, episode.done) == (3, False)
    assert episode.info["tool_calls"][0]["content"] == "alpha:2"


def test_an_answer_without_tool_calls_is_done_at_once(gateway):
    env = ToolEnv(TASK, tools=[Timed("alpha", 1.0)])
    with gateway(lambda prompt: "No tools needed. #### 3") as _:
        _, episode = run_episode(env, max_steps=4)
    assert (episode.steps, episode.done, episode.total_reward) == (1, True, 0.0)


def test_bad_environment_input_fails_clearly():
    with pytest.raises(ValueError, match="has no usable prompt"):
        asyncio.run(ToolEnv({"id": "x", "prompt": 42}).reset())
    with pytest.raises(ValueError, match="tool names must be unique"):
        ToolEnv(TASK, tools=[Timed("alpha", 0), Timed("alpha", 1)])
    with pytest.raises(ValueError, match="max_steps must be a positive int"):
        AgentEnvLoop(ToolEnv(TASK), max_steps=0)
    with pytest.raises(ValueError, match="'tools' is set by the loop"):
        AgentEnvLoop(ToolEnv(TASK), tools=[])
    env = ToolEnv(TASK)
    asyncio.run(env.reset())
    with pytest.raises(ValueError, match="role 'assistant'"):
        asyncio.run(env.step({"role": "user", "content": "hi"}))


def test_a_failed_model_call_ends_the_episode_without_a_retried_ghost_step(gateway):
    import openai

    calls = []

    def failing(prompt):
        calls.append(prompt)
        raise RuntimeError("backend down")

    env = ToolEnv(TASK)
    with gateway(failing):
        with pytest.raises(openai.APIError):
            run_episode(env, max_steps=3)
    assert len(calls) == 1  # the openai client's default 2 retries would have asked three times
