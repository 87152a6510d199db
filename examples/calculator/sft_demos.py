"""Expert demonstrations for the calculator task, replayed through the gateway for `agentr1 sft`.

The expert calls the calculator with the task's expression, then states the result: the behaviour
the untrained SmolLM2-135M never shows (0 usable tool calls in 54 samples). The episode runs in
:class:`CalculatorEnv` (a ToolEnv with the same system prompt, question and tool as the
``solve`` agent, so the demonstrations look exactly like the agent's own sessions), and the final
answer is rewarded as :func:`exact_answer` rewards it.

    python -m agentr1.trainer.sft.replay examples.calculator.sft_demos:demonstrations n=64 \
        --db out/warmstart/traces.db --run-id calculator-demos
"""

from __future__ import annotations

import json
import re
from typing import Any

from examples.calculator.calculator import CALCULATOR, SYSTEM, calculator, final_number, make_tasks

from agentr1.envs import BaseTool, StepResult, ToolEnv, ToolResult
from agentr1.trainer.sft.replay import Demonstration


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


def demonstrations(n: int, *, seed: int = 0) -> list[Demonstration]:
    """Expert demonstrations of ``n`` training tasks (``make_tasks``' training problems: none of them, nor their
    swapped twins, is a validation or test problem)."""
    tasks = make_tasks("train", n, seed)
    return [Demonstration(task_id=t["id"], env=CalculatorEnv(t), actions=expert_turns(t), group_id=f"demo/{t['id']}",
                          metadata={"question": t["question"]}) for t in tasks]
