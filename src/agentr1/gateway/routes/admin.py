"""Admin: weight updates and pausing generation. Needs the admin key."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from agentr1.gateway.auth import require_admin
from agentr1.gateway.errors import APIError
from agentr1.gateway.limits import BoundedRoute
from agentr1.gateway.schemas import WeightUpdate

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)], route_class=BoundedRoute)


@router.post("/weights")
async def update_weights(body: WeightUpdate, request: Request) -> dict[str, Any]:
    backend = request.app.state.gateway.backend
    try:
        version = await backend.update_weights(body.path)
    except (FileNotFoundError, ValueError, OSError) as exc:
        raise APIError(400, f"cannot load weights from {body.path!r}: {exc}", code="invalid_weights") from exc
    return {"policy_version": version}


@router.post("/pause")
async def pause(request: Request) -> dict[str, Any]:
    await request.app.state.gateway.backend.pause()
    return {"paused": True}


@router.post("/resume")
async def resume(request: Request) -> dict[str, Any]:
    await request.app.state.gateway.backend.resume()
    return {"paused": False}
