"""The chains environment: a one-operation calculator in a :class:`ToolEnv`, and the answer scorer.

``ChainEnv`` is what the dataset rows name (``agent_name: examples.chains.env:ChainEnv``);
``agentr1.envs:run_task`` drives it with ``AgentEnvLoop`` and scores the final message with
:func:`exact_final` (the row's ``reward_model.scorer``): the session's outcome is 1 when the last
number of the model's final reply is the chain's result, else 0. No partial credit and no reward
for calling the tool: tool calls per episode are measured (``report.py``), not paid for.

A row's ``busy_calls`` (``env_kwargs``, from ``tasks.py:make_retry_tasks``) makes the calculator flaky: the
episode's calculator calls at those positions (0-based, every call it received counted, failed ones too) answer
:data:`BUSY` instead of a result, and the same call again then works. The expert never meets it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from agentr1.envs import BaseTool, StepResult, ToolEnv, ToolResult

__all__ = ["BUSY", "ChainEnv", "FlakyCalculator", "StepCalculator", "calculate_one", "exact_final", "final_number"]

_ONE_OPERATION = re.compile(r"\s*(-?\d+)\s*([-+*x\u00d7])\s*(-?\d+)\s*(?:=\s*)?")
MAX_DIGITS = 12
BUSY = "error: the calculator is busy, call it again"


def calculate_one(expression: str) -> str:
    """``"1081 - 318"`` -> ``"763"``; anything but one + - * on two integers is an ``error: ...`` line."""
    match = _ONE_OPERATION.fullmatch((expression or "").replace(",", ""))
    if match is None:
        return "error: give one operation on two whole numbers, like 1081 - 318"
    left, op, right = match.groups()
    if max(len(left.lstrip("-")), len(right.lstrip("-"))) > MAX_DIGITS:
        return f"error: numbers of at most {MAX_DIGITS} digits"
    a, b = int(left), int(right)
    return str(a + b if op == "+" else a - b if op == "-" else a * b)


class StepCalculator(BaseTool):
    name = "calculator"
    description = "Compute one operation (+, - or *) on two whole numbers, e.g. '1081 - 318'."
    parameters = {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(calculate_one(str(arguments["expression"])))


class FlakyCalculator(StepCalculator):
    """The calculator of one episode that answers :data:`BUSY` at the calls numbered in ``busy_calls``
    (0-based, counting every call it received, whatever it asked), and computes as usual otherwise."""

    def __init__(self, busy_calls: Iterable[int]) -> None:
        self.busy_calls = frozenset(int(k) for k in busy_calls)
        if any(k < 0 for k in self.busy_calls):
            raise ValueError(f"busy_calls must be call numbers >= 0, got {sorted(self.busy_calls)}")
        self.calls = 0

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        call, self.calls = self.calls, self.calls + 1
        return ToolResult(BUSY) if call in self.busy_calls else await super().execute(arguments)


class ChainEnv(ToolEnv):
    """The row's prompt with the one-operation calculator; done when the model answers without a call.

    In RL the answer is scored once, as the session's outcome (``run_task`` and the row's
    ``reward_model``), so by default the steps pay nothing. ``progress_reward`` (a row's ``env_kwargs``)
    pays a process reward as the chain advances: the step whose call returns the next intermediate result
    of the chain earns ``progress_reward / len(steps)`` (the whole chain's calls earn ``progress_reward``
    in total); it goes to the steps, not to the outcome, so success stays the exact final answer.
    ``score_final_step=True`` puts the answer's score on the final step instead: replayed demonstrations
    have no ``run_task``, and SFT's ``min_reward`` selects on the episode's return. ``busy_calls`` makes the
    calculator a :class:`FlakyCalculator` that fails those calls of the episode once each."""

    def __init__(self, task: dict[str, Any], *, score_final_step: bool = False, progress_reward: float = 0.0,
                 busy_calls: Iterable[int] = ()) -> None:
        busy = list(busy_calls)
        super().__init__(task, tools=[FlakyCalculator(busy) if busy else StepCalculator()])
        self.score_final_step = score_final_step
        self.progress_reward = float(progress_reward)
        self.chain_steps = task.get("steps") or []  # (left, operator, right, result) of each correct call
        self.results: list[str] = []  # what the calculator returned, in order

    async def step(self, action: dict[str, Any]) -> StepResult:
        before = self.progress()
        result = await super().step(action)
        self.results += [str(call["content"]) for call in result.info.get("tool_calls", [])]
        if self.progress_reward:
            result.reward += self.progress_reward * (self.progress() - before) / max(1, len(self.chain_steps))
        if result.done and self.score_final_step:
            result.reward = exact_final(str(action.get("content") or ""), self.task["answer"])
        return result

    def progress(self) -> int:
        """How many of the chain's leading intermediate results the calculator has returned so far."""
        seen = set(self.results)
        return next((k for k, (*_, value) in enumerate(self.chain_steps) if str(value) not in seen),
                    len(self.chain_steps))

    def anchor(self) -> str:
        """GiGPO's state: how far along the chain the episode is (``progress 2/3``, :meth:`progress`).
        Episodes of one task that reached the same point share the anchor, whatever wrong calls they made
        on the way."""
        return f"progress {self.progress()}/{len(self.chain_steps)}"


def final_number(text: str) -> int | None:
    numbers = re.findall(r"-?\d+", (text or "").replace(",", ""))
    return int(numbers[-1]) if numbers else None


def exact_final(solution: str, ground_truth: Any) -> float:
    """1.0 when the last whole number of the final reply equals the ground truth, else 0.0."""
    value = final_number(solution)
    return float(value is not None and value == int(ground_truth))
