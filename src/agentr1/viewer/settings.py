"""Settings of `agentr1 view` (flags, or AGENTR1_VIEW_* through the CLI)."""

from __future__ import annotations

from dataclasses import dataclass

from agentr1.store import DEFAULT_DB


@dataclass(slots=True)
class ViewerSettings:
    db: str = DEFAULT_DB  # the trace store (read only)
    runs_dir: str | None = None  # trainer output folders (metrics.jsonl, checkpoints/)
    tokenizer: str | None = None  # a model directory to decode token ids with
    gateway_url: str | None = None  # the gateway the chat page talks to
    model: str | None = None  # model name for the chat page (default: the gateway's first model)
    estimator: str = "grpo"  # advantage estimator on group pages
    chat_run: str = "chat"  # the run chat sessions are recorded in
