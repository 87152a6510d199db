"""The gateway's state, what every call needs: one :class:`Gateway` per app on ``app.state.gateway`` (settings,
backend and its typed abilities, renderer, sessions, writer, metrics and the context policies)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from agentr1.gateway.backends.base import Backend, BackendAbilities, check_backend
from agentr1.gateway.context import ContextPolicies, ContextPolicy
from agentr1.gateway.errors import APIError
from agentr1.gateway.metrics import Metrics
from agentr1.gateway.sessions import SessionRegistry, SessionState
from agentr1.gateway.settings import GatewaySettings
from agentr1.gateway.writer import StepWriter

__all__ = ["RETRY_HEADER", "Gateway", "client_retry_count"]

RETRY_HEADER = "x-stainless-retry-count"  # sent by Stainless SDKs (openai, anthropic): 0, then 1, 2 on retries


def client_retry_count(headers: Any) -> int | None:
    """The client's own attempt counter, None when it sends none (or something that is not a count: the
    header is the client's, not ours, so it is evidence to weigh, never a reason to refuse the call)."""
    value = headers.get(RETRY_HEADER)
    try:
        count = int(value) if value is not None else None
    except ValueError:
        return None
    return count if count is not None and count >= 0 else None


@dataclass
class Gateway:
    """Everything a call needs; one per app, on ``app.state.gateway``."""

    settings: GatewaySettings
    backend: Backend
    renderer: Any
    sessions: SessionRegistry
    writer: StepWriter
    metrics: Metrics
    context: ContextPolicies | None = None  # per-session context policies (None: append-only)
    responses: Any = None  # the Responses API's answers kept for previous_response_id (codecs.responses)
    abilities: BackendAbilities = field(init=False)  # the backend's optional operations, checked here

    def __post_init__(self) -> None:
        self.abilities = check_backend(self.backend)

    async def context_policy(self, state: SessionState) -> ContextPolicy | None:
        """The session's policy: chosen at creation (metadata "context") or the gateway's default."""
        if self.context is None:
            return None
        policy = self.context.cached(state.id)
        if policy is None:
            if state.auto:  # auto-created sessions have no choice of their own
                return self.context.default
            record = await asyncio.to_thread(self.sessions.store.get_session, state.id, steps=False)
            policy = self.context.from_metadata(state.id, record.metadata)
        return policy

    def served_models(self) -> list[str]:
        return [self.backend.model_name, *self.settings.model_aliases]

    def serves(self, requested: str) -> bool:
        return self.settings.accept_any_model or requested in self.served_models()

    def check_model(self, requested: str) -> None:
        if not self.serves(requested):
            raise APIError(404, f"The model `{requested}` does not exist; this gateway serves "
                                f"`{self.backend.model_name}`", code="model_not_found", param="model")
