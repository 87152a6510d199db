"""The gateway: an OpenAI-compatible HTTP server in front of a backend that records every call as a step.

This is the part's public API; other parts import from here or from :mod:`agentr1.gateway.backends`,
never from the modules inside (``tests/test_architecture.py`` checks it).
"""

from agentr1.gateway.app import create_app
from agentr1.gateway.context import ContextPolicyError, build_policy
from agentr1.gateway.errors import APIError, install_error_handlers
from agentr1.gateway.server import BackgroundServer, free_port
from agentr1.gateway.settings import GatewaySettings
from agentr1.gateway.tracing import configure_otlp

__all__ = [
    "APIError",
    "BackgroundServer",
    "ContextPolicyError",
    "GatewaySettings",
    "build_policy",
    "configure_otlp",
    "create_app",
    "free_port",
    "install_error_handlers",
]
