"""The calculator as a multi-turn tool environment with GiGPO anchors, for the estimator recipes.

``CalculatorEnv`` (a :class:`ToolEnv` with the calculator tool) gives the model up to
``max_attempts`` answers: a wrong final answer is told so and the episode continues, a right one
ends it. Rewards are process rewards from the environment, per step: 1 on the step whose answer is
right, 0 elsewhere (so a trajectory's return is 1 exactly when it solved the task).

Its anchor (:meth:`CalculatorEnv.anchor`, the GiGPO state) is the calculator's intermediate value:
the last result the calculator returned in this episode, and how many answers were rejected so
far. Two samples of a task that reached the same value after the same number of rejections are in
the same state, whatever words they used to get there; their steps form one GiGPO step group.

``solve`` is the trainer's agent entrypoint: it drives the environment with
:class:`~agentr1.envs.AgentEnvLoop` at temperature 1 (a task's ``sampling`` dict overrides it); the
trainer checks every step's recorded temperature and top_p against ``rollout.temperature`` /
``rollout.top_p`` and stops with an error on a mismatch.
"""

from __future__ import annotations

import re
from typing import Any

from examples.calculator.calculator import SYSTEM, calculator, final_number

from agentr1.envs import AgentEnvLoop, BaseTool, StepResult, ToolEnv, ToolResult

__all__ = ["CalculatorEnv", "CalculatorTool", "solve"]

MAX_ATTEMPTS = 3
RETRY = "That is not the right answer. Try again, and end with the final number."


class CalculatorTool(BaseTool):
    name = "calculator"
    description = "Evaluate an arithmetic expression with + - * / and parentheses."
    parameters = {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        result = calculator(str(arguments["expression"]))
        return ToolResult(result, info={"value": None if result.startswith("error") else result})


class CalculatorEnv(ToolEnv):
    """Calculator tool calls, then answers checked against the task's ``answer`` (up to ``max_attempts``)."""

    def __init__(self, task: dict[str, Any], *, max_attempts: int = MAX_ATTEMPTS) -> None:
        super().__init__(task, tools=[CalculatorTool()])
        self.max_attempts = max_attempts
        self.value: str | None = None  # the calculator's last result: the intermediate value
        self.rejected = 0

    async def reset(self) -> list[dict[str, Any]]:
        self.value, self.rejected = None, 0
        self.history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": self.task["question"]}]
        return self.build_observation()

    def anchor(self) -> str:
        return f"value={self.value if self.value is not None else 'none'} rejected={self.rejected}"

    async def step(self, action: dict[str, Any]) -> StepResult:
        result = await super().step(action)
        for call in result.info.get("tool_calls", []):
            value = (call.get("info") or {}).get("value")
            if value is not None and re.fullmatch(r"-?\d+(?:\.\d+)?", value):
                self.value = value
        if not result.done:
            return result
        answer = final_number(str(action.get("content") or ""))
        if answer is not None and abs(answer - float(self.task["answer"])) < 1e-6:
            return StepResult(result.observation, 1.0, True, result.info)
        self.rejected += 1
        if self.rejected >= self.max_attempts:
            return StepResult(result.observation, 0.0, True, result.info)
        self.history.append({"role": "user", "content": RETRY})
        return StepResult(self.build_observation(), 0.0, False, result.info)


async def solve(task: dict[str, Any]) -> None:
    """One episode; the rewards are the environment's, per step (nothing is returned as an outcome)."""
    sampling = {"max_tokens": 48, "temperature": 1.0, **(task.get("sampling") or {})}
    await AgentEnvLoop(CalculatorEnv(task), max_steps=3 * MAX_ATTEMPTS, **sampling).run()
    return None
