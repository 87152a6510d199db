"""agentr1.sdk: make an existing agent trainable. Light: httpx and pydantic only.

    from agentr1.sdk import rollout

    @rollout(task_id=lambda task: task["id"])
    def solve(task) -> float:
        ...  # any OpenAI-compatible client pointed at the gateway; return the reward
"""

from agentr1.sdk.anchors import ANCHOR_PREFIX, aanchor, anchor, anchor_name, anchor_of_reward_name
from agentr1.sdk.batches import SessionBatches
from agentr1.sdk.client import configuration, configure, gateway_url
from agentr1.sdk.context import ActiveSession, current_session
from agentr1.sdk.errors import (
    AgentR1Error,
    GatewayConnectionError,
    GatewayConnectionLost,
    GatewayError,
    GatewayTimeout,
    GatewayUnreachable,
    NoActiveSession,
    SessionAlreadyFinished,
    UnknownStep,
)
from agentr1.sdk.failures import (
    FAILURE_KINDS,
    INFRASTRUCTURE_KINDS,
    EnvironmentFailure,
    failure_error_text,
    failure_kind,
    failure_kind_of_error,
    is_infrastructure_error,
    tagged_error,
)
from agentr1.sdk.propagation import install as install_propagation
from agentr1.sdk.rollout import (
    api_key,
    areward,
    async_openai_client,
    base_url,
    fail_session,
    openai_client,
    reward,
    rollout,
    session,
)
from agentr1.sdk.runner import RunResult, run_command

__all__ = [
    "ANCHOR_PREFIX",
    "FAILURE_KINDS",
    "INFRASTRUCTURE_KINDS",
    "ActiveSession",
    "AgentR1Error",
    "EnvironmentFailure",
    "GatewayConnectionError",
    "GatewayConnectionLost",
    "GatewayError",
    "GatewayTimeout",
    "GatewayUnreachable",
    "NoActiveSession",
    "RunResult",
    "SessionAlreadyFinished",
    "SessionBatches",
    "UnknownStep",
    "aanchor",
    "anchor",
    "anchor_name",
    "anchor_of_reward_name",
    "api_key",
    "areward",
    "async_openai_client",
    "base_url",
    "configuration",
    "configure",
    "current_session",
    "fail_session",
    "failure_error_text",
    "failure_kind",
    "failure_kind_of_error",
    "gateway_url",
    "install_propagation",
    "is_infrastructure_error",
    "openai_client",
    "reward",
    "rollout",
    "run_command",
    "session",
    "tagged_error",
]
