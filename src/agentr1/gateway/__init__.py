"""The gateway: an OpenAI-compatible HTTP server in front of a backend that records every call as a step.

This is the part's public API; other parts import from here or from :mod:`agentr1.gateway.backends`,
never from the modules inside (``tests/test_architecture.py`` checks it). Names are imported on
first use, so ``from agentr1.gateway import GatewaySettings`` (the CLI's flags) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentr1.core import lazy_exports

if TYPE_CHECKING:
    from agentr1.gateway.app import create_app
    from agentr1.gateway.branches import branch_report
    from agentr1.gateway.context import ContextPolicyError, build_policy
    from agentr1.gateway.embedded import EmbeddedGateway
    from agentr1.gateway.errors import APIError, install_error_handlers
    from agentr1.gateway.server import BackgroundServer, free_port, uvicorn_options
    from agentr1.gateway.settings import (
        RENAMED,
        AuthSettings,
        BackendName,
        GatewaySettings,
        ImageSettings,
        LaunchSettings,
        WriteSettings,
    )
    from agentr1.gateway.shards import GatewayShards
    from agentr1.gateway.tracing import configure_otlp

_MODULES = {"APIError": "errors", "AuthSettings": "settings", "BackendName": "settings", "BackgroundServer": "server",
            "ContextPolicyError": "context", "EmbeddedGateway": "embedded", "GatewaySettings": "settings", "GatewayShards": "shards",
            "branch_report": "branches", "build_policy": "context", "configure_otlp": "tracing", "create_app": "app",
            "free_port": "server", "install_error_handlers": "errors", "uvicorn_options": "server",
            "ImageSettings": "settings", "LaunchSettings": "settings", "WriteSettings": "settings",
            "RENAMED": "settings"}
__all__ = [
    "RENAMED",
    "APIError",
    "AuthSettings",
    "BackendName",
    "BackgroundServer",
    "ContextPolicyError",
    "EmbeddedGateway",
    "GatewaySettings",
    "GatewayShards",
    "ImageSettings",
    "LaunchSettings",
    "WriteSettings",
    "branch_report",
    "build_policy",
    "configure_otlp",
    "create_app",
    "free_port",
    "install_error_handlers",
    "uvicorn_options",
]
__getattr__ = lazy_exports(__name__, _MODULES)
