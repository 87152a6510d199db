"""agentr1.envs: Agent-R1's native layers for people who write environments rather than agents.

    BaseTool < ToolEnv < AgentEnv + AgentEnvLoop < AgentFlowBase

All of them make their model calls through the gateway, so their traces are ordinary steps.
``agentr1.envs:run_task`` runs Agent-R1 dataset rows (``agent_name``, ``env_kwargs``) in the trainer.
"""

from agentr1.envs.base import AgentEnv, StepResult
from agentr1.envs.flow import AgentFlowBase
from agentr1.envs.loop import AgentEnvLoop, Episode
from agentr1.envs.registry import (
    UnknownName,
    register_env,
    register_flow,
    register_scorer,
    register_tool,
    resolve,
    resolve_tool,
)
from agentr1.envs.task import run_task, score_answer
from agentr1.envs.tool_env import ToolEnv
from agentr1.envs.tools import BaseTool, ToolResult, run_tool_calls

__all__ = [
    "AgentEnv",
    "AgentEnvLoop",
    "AgentFlowBase",
    "BaseTool",
    "Episode",
    "StepResult",
    "ToolEnv",
    "ToolResult",
    "UnknownName",
    "register_env",
    "register_flow",
    "register_scorer",
    "register_tool",
    "resolve",
    "resolve_tool",
    "run_task",
    "run_tool_calls",
    "score_answer",
]
