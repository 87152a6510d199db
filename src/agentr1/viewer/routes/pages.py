"""HTML pages (one shell; the page's script renders from the JSON API), the viewer's config, and
Prometheus text of the trainer's newest metrics."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, PlainTextResponse

from agentr1.viewer.runs_dir import prometheus_text
from agentr1.viewer.schemas import ViewerConfig
from agentr1.viewer.state import viewer

STATIC = Path(__file__).resolve().parent.parent / "static"
PAGES = ("/", "/runs/{run_id}", "/sessions/{session_id}", "/groups/{group_id:path}", "/chat")

pages = APIRouter(include_in_schema=False)
api = APIRouter(tags=["viewer"])


def _shell() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers={"Cache-Control": "no-cache"})


for _path in PAGES:
    pages.add_api_route(_path, _shell, methods=["GET"])


@pages.get("/metrics")
def metrics(request: Request) -> PlainTextResponse:
    """``agentr1_train_*`` gauges: the newest metrics.jsonl record of each trainer output folder."""
    return PlainTextResponse(prometheus_text(viewer(request).runs), media_type="text/plain; version=0.0.4")


@api.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@api.get("/config", response_model=ViewerConfig)
def config(request: Request) -> ViewerConfig:
    s = viewer(request).settings
    return ViewerConfig(gateway_url=s.gateway_url, tokenizer=s.tokenizer, runs_dir=s.runs_dir, model=s.model,
                        estimator=s.estimator)
