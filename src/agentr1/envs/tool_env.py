"""ToolEnv: multi-turn tool calling over a set of tools, the most common Agent-R1 environment.

The episode starts from the task's prompt messages. Each step appends the model's assistant
message; if it calls tools, they run concurrently, their tool messages are appended in call order,
and the step's reward is the sum of the tools' rewards. The episode is done when the model answers
without calling a tool. The observation is the append-only history by default; override
:meth:`build_observation` for another context (a sliding window, a summary).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentr1.envs.base import AgentEnv, StepResult
from agentr1.envs.registry import register_env, resolve_tool
from agentr1.envs.tools import BaseTool, run_tool_calls

_ACTION_KEYS = ("role", "content", "tool_calls", "reasoning_content")


def task_messages(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The first messages of a task: Agent-R1's ``prompt`` (a list of chat messages, or a string),
    else a ``question`` as one user message."""
    prompt = task.get("prompt", task.get("question"))
    if isinstance(prompt, str) and prompt:
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, Sequence) and prompt and all(isinstance(m, dict) and "role" in m for m in prompt):
        return [{k: v for k, v in m.items() if v is not None} for m in prompt]
    raise ValueError(f"task {task.get('id', '?')!r} has no usable prompt: expected `prompt` as a list of chat "
                     f"messages (or a string) or a `question` string, got {prompt!r}")


def clean_action(action: Any) -> dict[str, Any]:
    """The assistant message as the history keeps it; a malformed action is an error, not a guess."""
    if not isinstance(action, dict):
        raise TypeError(f"action must be an assistant message dict, got {type(action).__name__}")
    if action.get("role", "assistant") != "assistant":
        raise ValueError(f"action must have role 'assistant', got {action.get('role')!r}")
    calls = action.get("tool_calls")
    if calls is not None and not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
        raise TypeError(f"action tool_calls must be a list of dicts, got {calls!r}")
    message = {k: action[k] for k in _ACTION_KEYS if action.get(k) is not None}
    message["role"] = "assistant"
    return message


@register_env("tool_env")
class ToolEnv(AgentEnv):
    """``ToolEnv(task, tools=[...])``: tools are :class:`BaseTool` instances or classes, registered
    tool names, or ``module:Class`` paths (what a parquet row's ``env_kwargs`` can hold)."""

    def __init__(self, task: dict[str, Any], *, tools: Sequence[Any] = ()) -> None:
        self.task = task
        self.tools: list[BaseTool] = [resolve_tool(t) for t in tools]
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique, got {names}")
        self.history: list[dict[str, Any]] = []

    async def reset(self) -> list[dict[str, Any]]:
        self.history = task_messages(self.task)
        return self.build_observation()

    def build_observation(self) -> list[dict[str, Any]]:
        """What the model sees next, built from :attr:`history` (append-only here)."""
        return [dict(m) for m in self.history]

    async def step(self, action: dict[str, Any]) -> StepResult:
        if not self.history:
            raise RuntimeError("step() before reset()")
        message = clean_action(action)
        self.history.append(message)
        calls = message.get("tool_calls") or []
        if not calls:
            return StepResult(self.build_observation(), 0.0, True, {"answer": message.get("content") or ""})
        outcomes = await run_tool_calls(calls, self.tools)
        self.history.extend(o.message for o in outcomes)
        reward = sum(o.result.reward or 0.0 for o in outcomes)
        info = {"tool_calls": [{"tool": o.tool, "content": o.result.content, "reward": o.result.reward,
                                "error": o.error, "info": o.result.info} for o in outcomes]}
        return StepResult(self.build_observation(), float(reward), False, info)
