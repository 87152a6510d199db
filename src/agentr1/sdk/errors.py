"""Errors the SDK raises; each says what went wrong and what to do."""

from __future__ import annotations


class AgentR1Error(Exception):
    """Base class of SDK errors."""


class GatewayConnectionError(AgentR1Error):
    """A call to the gateway failed in transport (no HTTP answer): one of the three below."""


class GatewayUnreachable(GatewayConnectionError):
    """No connection to the gateway could be made (refused, unknown host): is it running at that URL?"""


class GatewayTimeout(GatewayConnectionError, TimeoutError):
    """The gateway did not answer in time (connect, send, read or pool timeout): it, or the caller's
    event loop, is overloaded. An infrastructure failure of kind ``timeout``, not a policy failure."""


class GatewayConnectionLost(GatewayConnectionError, ConnectionError):
    """The connection to the gateway broke mid-call (reset, closed without an answer)."""


class GatewayError(AgentR1Error):
    """The gateway answered with an error (its OpenAI-shaped body is kept)."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(f"{message} (HTTP {status}{', ' + code if code else ''})")
        self.status, self.message, self.code = status, message, code


class SessionAlreadyFinished(GatewayError):
    """The session was finished already; start a new one."""


class UnknownStep(GatewayError):
    """A reward named a step the session does not have."""


class NoActiveSession(AgentR1Error):
    """reward() or a client helper was called outside any rollout or session."""
