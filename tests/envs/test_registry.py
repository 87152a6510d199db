"""The registry (names and module:attr for environments, flows, tools, scorers) and
``agentr1.envs:run_task`` on Agent-R1 parquet rows, loaded the way the trainer loads them."""

from __future__ import annotations

import asyncio
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentr1.envs import (
    AgentFlowBase,
    ToolEnv,
    UnknownName,
    register_env,
    register_flow,
    register_scorer,
    resolve,
    resolve_tool,
    run_task,
)
from agentr1.sdk import session
from agentr1.trainer.config import DataConfig
from agentr1.trainer.tasks import load_tasks
from conftest import tool_call, tool_results_seen


@register_flow("test_echo_flow")
class EchoFlow(AgentFlowBase):
    async def run(self, task):
        reply = await self.client().chat.completions.create(model="policy", messages=task["prompt"])
        return float(self.env_kwargs["bonus"]) + len(reply.choices[0].message.content or "") * 0.0


@register_scorer("test_contains")
def contains(solution_str, ground_truth):
    return float(str(ground_truth) in solution_str)


def test_resolve_registered_names_and_import_paths():
    assert resolve("tool_env") is ToolEnv
    assert resolve("test_echo_flow") is EchoFlow
    assert resolve("agentr1.envs:ToolEnv") is ToolEnv
    assert type(resolve_tool("examples.gsm8k.task:Calculator")).__name__ == "Calculator"


@pytest.mark.parametrize(("name", "message"), [
    ("no_such_env", r"unknown agent_name 'no_such_env'; registered environments: \[.*'tool_env'.*\], flows: \[.*'test_echo_flow'"),
    ("agentr1.envs:ToolResult", "not an AgentEnv or AgentFlowBase subclass"),
    ("agentr1.nowhere:Env", "cannot import 'agentr1.nowhere'"),
    ("agentr1.envs:Missing", "has no 'Missing'"),
    ("", "agent_name must be a non-empty string"),
    (None, "agent_name must be a non-empty string"),
])
def test_unknown_names_fail_clearly(name, message):
    with pytest.raises(UnknownName, match=message):
        resolve(name)


def test_registering_a_name_twice_is_refused():
    with pytest.raises(ValueError, match="environment 'tool_env' is already registered"):
        register_env("tool_env")(EchoFlow)
    with pytest.raises(UnknownName, match="unknown tool 'nope'"):
        resolve_tool("nope")


ROWS = [
    {"data_source": "test", "agent_name": "tool_env",
     "prompt": [{"role": "user", "content": "What is 6*7?"}],
     "reward_model": {"style": "rule", "ground_truth": "42", "scorer": "test_contains"},
     "env_kwargs": {"tools": ["examples.gsm8k.task:Calculator"], "max_steps": 4, "sampling": {"temperature": 0.0}}},
    {"data_source": "test", "agent_name": "test_echo_flow",
     "prompt": [{"role": "user", "content": "hello"}],
     "reward_model": {"style": "rule", "ground_truth": "0", "scorer": "test_contains"},
     "env_kwargs": {"bonus": 0.25}},
]


def calculator_then_answer(prompt: str) -> str:
    if "What is 6*7?" in prompt and tool_results_seen(prompt) == 0:
        return tool_call("calculator", expression="6*7")
    return "The answer is " + prompt.rsplit("<tool_response>\n", 1)[-1].split("\n")[0]


def test_run_task_on_agent_r1_parquet_rows(gateway, tmp_path):
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    tasks = load_tasks(DataConfig(train_files=[str(path)]), "train")
    # parquet unifies the env_kwargs structs: keys of the other row come back as None and are ignored
    assert tasks[0]["env_kwargs"]["bonus"] is None and tasks[1]["env_kwargs"]["tools"] is None

    async def go(task):
        async with session(task_id=task["id"]) as active:
            return active.id, await run_task(task)

    with gateway(calculator_then_answer) as (_, store):
        (tool_sid, tool_reward), (flow_sid, flow_reward) = [asyncio.run(go(t)) for t in tasks]
        tool_steps, flow_steps = store.get_session(tool_sid).steps, store.get_session(flow_sid).steps

    assert tool_reward == 1.0  # the calculator said 42, the answer contains the ground truth
    assert len(tool_steps) == 2 and tool_steps[1].action["content"] == "The answer is 42"
    assert tool_steps[0].feedback_messages[0]["content"] == "42"
    assert tool_steps[0].sampling.get("temperature") == 0.0
    assert flow_reward == 0.25 and len(flow_steps) == 1


def test_run_task_rejects_bad_rows_clearly():
    def run(row):
        return asyncio.run(run_task(row))

    with pytest.raises(UnknownName, match="agent_name must be a non-empty string"):
        run({"prompt": "hi"})
    with pytest.raises(ValueError, match="env_kwargs is not valid JSON"):
        run({"id": "j", "agent_name": "tool_env", "env_kwargs": "{oops"})
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        run({"agent_name": "tool_env", "env_kwargs": json.dumps({"colour": "red"})})


def test_a_reward_model_without_a_scorer_is_an_error():
    from agentr1.envs import score_answer

    with pytest.raises(ValueError, match="reward_model needs a `scorer`"):
        score_answer({"id": "s", "reward_model": {"style": "rule", "ground_truth": "1"}}, "1")
    with pytest.raises(ValueError, match="only reward_model style 'rule'"):
        score_answer({"id": "s", "reward_model": {"style": "model"}}, "1")
    assert score_answer({"reward_model": {"ground_truth": "1"}, "data_source": "test_contains"}, "1") == 1.0
