"""Expert demonstrations for the calculator task, replayed through the gateway for `agentr1 sft`.

The expert calls the calculator with the task's expression, then states the result: the behaviour
the untrained SmolLM2-135M never shows (0 usable tool calls in 54 samples). The episode runs in
:class:`CalculatorEnv` (a ToolEnv with the same system prompt, question and tool as the
``solve`` agent, so the demonstrations look exactly like the agent's own sessions), and the final
answer is rewarded as :func:`exact_answer` rewards it.

    python -m agentr1.trainer.sft.replay examples.calculator.sft_demos:demonstrations n=64 val_size=16 \
        --db out/warmstart/traces.db --run-id calculator-demos
"""

from __future__ import annotations

import json
import re
from typing import Any

from examples.calculator.calculator import CALCULATOR, SYSTEM, calculator, final_number, make_tasks

from agentr1.envs import BaseTool, StepResult, ToolEnv, ToolResult
from agentr1.trainer.sft.replay import Demonstration

VAL_SEED = 1_000_003  # the seed agentr1's task loader gives the validation split (data.seed 0)


class CalculatorTool(BaseTool):
    name = CALCULATOR["function"]["name"]
    description = CALCULATOR["function"]["description"]
    parameters = CALCULATOR["function"]["parameters"]

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(calculator(str(arguments.get("expression", ""))))


class CalculatorEnv(ToolEnv):
    """The ``solve`` agent's conversation as an environment; reward 1 for the exact final answer."""

    def __init__(self, task: dict[str, Any]) -> None:
        prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["question"]}]
        super().__init__({**task, "prompt": prompt}, tools=[CalculatorTool()])

    async def step(self, action: dict[str, Any]) -> StepResult:
        result = await super().step(action)
        if result.done:
            value = final_number(action.get("content") or "")
            result.reward = float(value is not None and abs(value - float(self.task["answer"])) < 1e-6)
        return result


def expert_turns(task: dict[str, Any]) -> list[dict[str, Any]]:
    """Call the calculator on the question's expression, then state the result."""
    match = re.fullmatch(r"What is (.+)\?", task["question"])
    if match is None:
        raise ValueError(f"not a calculator question: {task['question']!r}")
    expression = match.group(1)
    call = {"id": "call_0", "type": "function",
            "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})}}
    return [{"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "assistant", "content": f"{expression} = {task['answer']}"}]


def demonstrations(n: int, *, seed: int = 0, val_size: int = 16) -> list[Demonstration]:
    """Expert demonstrations of ``n`` training tasks; questions of the first ``val_size`` validation
    tasks are left out, so held-out success stays held out."""
    held_out = {t["question"] for t in make_tasks("val", val_size, VAL_SEED)}
    tasks = [t for t in make_tasks("train", n, seed) if t["question"] not in held_out]
    return [Demonstration(task_id=t["id"], env=CalculatorEnv(t), actions=expert_turns(t), group_id=f"demo/{t['id']}",
                          metadata={"question": t["question"]}) for t in tasks]
