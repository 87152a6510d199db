"""The GSM8K recipe two ways on the same gateway: the Agent-R1 ToolEnv row through
``agentr1.envs:run_task`` and the same task as an unmodified OpenAI-SDK agent
(``examples/gsm8k/agent.py``). Compared from the store, their step records are the same: observation
and action token ids, the messages the model saw, the tool feedback, the step count, the reward."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from examples.gsm8k.agent import solve
from examples.gsm8k.prepare import DATA, agent_r1_row, read_jsonl

from agentr1.envs import run_task
from agentr1.sdk import session
from conftest import tool_call, tool_results_seen

GREEDY = {"temperature": 0.0, "max_tokens": 64}


def calculator_agent_script(prompt: str) -> str:
    """A deterministic policy: a malformed call, a good one, then the '#### N' answer."""
    seen = tool_results_seen(prompt)
    if seen == 0:
        return "Let me compute.\n" + tool_call("calculator", expr="48/2")  # missing 'expression'
    if seen == 1:
        return tool_call("calculator", expression="48 + 48/2")
    result = prompt.rsplit("<tool_response>\n", 1)[-1].split("\n", 1)[0]
    return f"She sold {result} clips.\n#### {result}"


def without_call_ids(value):
    """Tool-call ids are minted per response by the gateway (``call_<random>``); all else must match."""
    if isinstance(value, dict):
        return {k: without_call_ids(v) for k, v in value.items() if k not in ("id", "tool_call_id")}
    if isinstance(value, list):
        return [without_call_ids(v) for v in value]
    return value


def step_view(step):
    return {"observation_ids": step.observation_ids, "action_ids": step.action_ids,
            "messages_seen": without_call_ids(step.messages_seen), "tools": step.tools,
            "action": without_call_ids(step.action), "finish_reason": step.finish_reason,
            "feedback_messages": without_call_ids(step.feedback_messages), "feedback_ids": step.feedback_ids,
            "sampling": step.sampling}


def run_both(row):
    async def one(kind):
        async with session(task_id=kind) as active:
            reward = await run_task(row) if kind == "env" else await asyncio.to_thread(solve, row)
        return active.id, reward

    return asyncio.run(one("env")), asyncio.run(one("agent"))


def test_tool_env_and_openai_agent_record_the_same_steps(gateway):
    row = agent_r1_row(read_jsonl(Path(DATA) / "train.jsonl")[0], "train", 0, sampling=GREEDY)
    assert row["reward_model"]["ground_truth"] == "72"
    with gateway(calculator_agent_script) as (_, store):
        (env_sid, env_reward), (agent_sid, agent_reward) = run_both(row)
        env_steps, agent_steps = store.get_session(env_sid).steps, store.get_session(agent_sid).steps

    assert env_reward == agent_reward == 1.0
    assert len(env_steps) == len(agent_steps) == 3
    for env_step, agent_step in zip(env_steps, agent_steps, strict=True):
        assert step_view(env_step) == step_view(agent_step)
    assert env_steps[0].feedback_messages[0]["content"] == "error: missing required argument(s) ['expression']"
    assert env_steps[1].feedback_messages[0]["content"] == "72"
    assert env_steps[2].observation_ids[: len(env_steps[1].observation_ids)] == env_steps[1].observation_ids


@pytest.mark.slow
def test_same_steps_with_a_real_model_sampling_greedily(tmp_path, tiny_model_path):
    """The real embedded engine at temperature 0 (a tiny random model: it answers in one step)."""
    from agentr1.engine import EngineOptions
    from agentr1.gateway.app import create_app
    from agentr1.gateway.backends import LocalBackend
    from agentr1.gateway.server import BackgroundServer
    from agentr1.gateway.settings import GatewaySettings
    from agentr1.sdk import configure
    from agentr1.store import TraceStore

    row = agent_r1_row(read_jsonl(Path(DATA) / "test.jsonl")[0], "test", 0, sampling={"temperature": 0.0,
                                                                                        "max_tokens": 24})
    db = tmp_path / "greedy.db"
    store = TraceStore.open(str(db))
    backend = LocalBackend(tiny_model_path, EngineOptions(device="cpu"), model_name="policy")
    try:
        with BackgroundServer(create_app(GatewaySettings(db=str(db), accept_any_model=True), store=store,
                                         backend=backend)) as url:
            configure(url)
            (env_sid, env_reward), (agent_sid, agent_reward) = run_both(row)
            env_steps, agent_steps = store.get_session(env_sid).steps, store.get_session(agent_sid).steps
    finally:
        asyncio.run(backend.close())
        store.close()
    assert env_reward == agent_reward
    assert len(env_steps) == len(agent_steps) >= 1
    assert [step_view(s) for s in env_steps] == [step_view(s) for s in agent_steps]
    assert len(env_steps[0].action_ids) > 0
