"""The session a piece of code runs in, carried by contextvars and handed to threads.

asyncio tasks copy the context when they are created, so they keep their session on their own.
Threads do not: :func:`install_thread_propagation` makes ``threading.Thread`` and
``ThreadPoolExecutor.submit`` carry the context of the code that started them, so a decorated
agent that fans out to a thread pool keeps its session in every worker.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_current: contextvars.ContextVar[ActiveSession | None] = contextvars.ContextVar("agentr1_session", default=None)
_installed = False
_install_lock = threading.Lock()


@dataclass
class ActiveSession:
    """A session opened by the SDK: what the gateway returned for it."""

    id: str
    gateway_url: str
    base_url: str  # OpenAI base_url of this session: {gateway}/sessions/{id}/v1
    api_key: str
    run_id: str | None = None
    task_id: str | None = None
    group_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    last_step: int | None = None  # the newest step index the gateway reported for this session
    last_step_stale: bool = False  # a streamed answer came since: its step index is not in its headers


def current_session() -> ActiveSession | None:
    """The session of the calling code, or None outside any rollout."""
    return _current.get()


def set_current(session: ActiveSession | None) -> contextvars.Token[ActiveSession | None]:
    return _current.set(session)


def reset_current(token: contextvars.Token[ActiveSession | None]) -> None:
    _current.reset(token)


def install_thread_propagation() -> None:
    """Make new threads and thread-pool tasks inherit the caller's contextvars (idempotent)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        original_start = threading.Thread.start
        original_submit = concurrent.futures.ThreadPoolExecutor.submit

        @functools.wraps(original_start)
        def start(self: threading.Thread) -> None:
            ctx = contextvars.copy_context()
            run = self.run
            self.run = lambda: ctx.run(run)  # type: ignore[method-assign]
            original_start(self)

        @functools.wraps(original_submit)
        def submit(self: concurrent.futures.ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any,
                   **kwargs: Any) -> concurrent.futures.Future[Any]:
            return original_submit(self, contextvars.copy_context().run, fn, *args, **kwargs)

        threading.Thread.start = start  # type: ignore[method-assign]
        concurrent.futures.ThreadPoolExecutor.submit = submit  # type: ignore[method-assign]
        _installed = True
