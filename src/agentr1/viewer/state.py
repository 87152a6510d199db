"""What the viewer's routes share (kept on ``app.state.viewer``, created in the lifespan)."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from fastapi import Request

from agentr1.gateway import APIError
from agentr1.store import TraceStore
from agentr1.viewer.groups import AdvantageSource
from agentr1.viewer.runs_dir import RunsDir
from agentr1.viewer.settings import ViewerSettings
from agentr1.viewer.tokens import Tokenizers


@dataclass(slots=True)
class ViewerState:
    settings: ViewerSettings
    store: TraceStore
    tokenizers: Tokenizers
    runs: RunsDir
    http: httpx.Client  # to the gateway, for the chat page
    advantages: AdvantageSource | None = None  # the trainer's estimators, for the group pages (handed in)


def viewer(request: Request) -> ViewerState:
    return request.app.state.viewer


def not_found(message: str) -> APIError:
    return APIError(404, message, code="not_found")


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, code="invalid_request", param=param)
