"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from agentr1.gateway.metrics import backend_gauges

router = APIRouter(tags=["health"])


@router.get("/health")
async def health() -> dict[str, Any]:
    return {"status": "ok"}


@router.get("/ready")
async def ready(request: Request) -> JSONResponse:
    gw = request.app.state.gateway
    ok = await gw.backend.ready()
    body = {"ready": ok, "model": gw.backend.model_name, "policy_version": gw.backend.policy_version}
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get("/metrics")
async def metrics(request: Request) -> PlainTextResponse:
    gw = request.app.state.gateway
    text = gw.metrics.render(
        write_queue=gw.writer.pending, steps_committed=gw.writer.committed,
        steps_failed=gw.writer.failed, write_lag_s=gw.writer.last_commit_lag_s,
        policy_version=gw.backend.policy_version, backend=backend_gauges(gw.abilities.engine_stats),
    )
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
