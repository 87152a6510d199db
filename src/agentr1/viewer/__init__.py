"""agentr1.viewer: a local web app over the trace store (runs, sessions, steps token by
token, task groups with advantages, training curves, a chat page) and the chat client of
`agentr1 chat`. The web app needs the gateway extra; the chat client only httpx."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentr1.viewer.browser import CHROMIUM, CHROMIUM_ARGS, ViewerPageError, content_height, open_viewer_page
from agentr1.viewer.chat import CALCULATOR_TOOL, ChatError, GatewayChat, calculator
from agentr1.viewer.settings import ViewerSettings

if TYPE_CHECKING:
    from agentr1.viewer.app import create_viewer_app

__all__ = ["CALCULATOR_TOOL", "CHROMIUM", "CHROMIUM_ARGS", "ChatError", "GatewayChat", "ViewerPageError", "ViewerSettings",
           "calculator", "content_height", "create_viewer_app", "open_viewer_page"]


def __getattr__(name: str) -> Any:
    if name == "create_viewer_app":  # imported on use: FastAPI and the store are not needed by the chat client
        from agentr1.viewer.app import create_viewer_app

        return create_viewer_app
    raise AttributeError(name)
