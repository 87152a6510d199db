"""`@rollout`, `session(...)` and `reward(...)`: turn a run of an existing agent into a trajectory."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar, overload

from agentr1.sdk import propagation
from agentr1.sdk.anchors import anchor_call
from agentr1.sdk.client import (
    arequest,
    as_session,
    create_call,
    finish_call,
    request,
    shared_ssl_context,
)
from agentr1.sdk.context import ActiveSession, current_session, reset_current, set_current
from agentr1.sdk.errors import GatewayConnectionError, NoActiveSession, SessionAlreadyFinished
from agentr1.sdk.failures import failure_error_text, tagged_error
from agentr1.sdk.step_target import alearn_last_step, learn_last_step, step_reward_call

log = logging.getLogger("agentr1.sdk")
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
Field = str | Callable[..., Any] | None
Send = Callable[..., Awaitable[dict[str, Any]]]  # a call to the gateway: request's arguments in, its answer out


async def _send_blocking(method: str, path: str, session: ActiveSession | None = None,
                         json: Any = None) -> dict[str, Any]:
    """:func:`request` as a :data:`Send`: it blocks, so a coroutine that awaits only this never suspends."""
    return request(method, path, session, json=json)


def _blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine``, which awaits nothing but :func:`_send_blocking`, to its end in this thread."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("a blocking session call suspended")


def _tracer() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace.get_tracer("agentr1.sdk")


class session:
    """Open a session (trajectory) for the code inside; sync (`with`) or async (`async with`).

    Model calls to the gateway inside carry the session. On normal exit the session is finished
    (with ``reward`` as its outcome reward if set); on an exception it is marked failed with the
    error and the exception propagates (finishing is tried twice when the gateway does not answer;
    "already finished" on the second try means the first landed). Inside an active session, a nested ``session`` joins the
    outer one (sub-agents belong to the same trajectory) unless ``new=True``.

    ``active``: a session that is open already (``SessionBatches.open``): the code runs in it, and it is neither
    opened nor ended here (whoever opened it ends it).
    """

    def __init__(self, *, task_id: str | None = None, group_id: str | None = None, run_id: str | None = None,
                 metadata: dict[str, Any] | None = None, new: bool = False, active: ActiveSession | None = None) -> None:
        self.fields = (run_id, task_id, group_id, metadata)
        self.new = new
        self.given = active
        self.reward: float | None = None
        self.active: ActiveSession | None = None
        self._owner = False
        self._token: Any = None
        self._span: contextlib.AbstractContextManager[Any] | None = None

    # Entering and leaving are written once, as coroutines over a ``send`` (:data:`Send`): the async protocol
    # awaits them with :func:`arequest`, the sync one runs them with the blocking :func:`request` (they never
    # suspend then: :func:`_blocking`).

    def __enter__(self) -> ActiveSession:
        return _blocking(self._enter(_send_blocking))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        _blocking(self._exit(exc, _send_blocking))

    async def __aenter__(self) -> ActiveSession:
        return await self._enter(arequest)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        await self._exit(exc, arequest)

    async def _enter(self, send: Send) -> ActiveSession:
        if (outer := self._join_outer()) is not None:
            return outer
        if self.given is not None:
            return self._run_in_given()
        method, path, _, body = create_call(*self.fields)
        return self._begin(await send(method, path, json=body))

    async def _exit(self, exc: BaseException | None, send: Send) -> None:
        if self.given is not None:
            self._exit_context(exc)
            return
        if not self._owner:
            return
        try:
            method, path, sess, body = finish_call(self.active, *self._outcome(exc))  # type: ignore[arg-type]
            try:
                await send(method, path, sess, json=body)
            except GatewayConnectionError:  # once more: a session left running records no outcome
                with contextlib.suppress(SessionAlreadyFinished):
                    await send(method, path, sess, json=body)
        except Exception as err:
            self._finish_failed(err, exc)
        finally:
            self._exit_context(exc)

    # -- shared ----------------------------------------------------------------------------

    def _join_outer(self) -> ActiveSession | None:
        """The enclosing session, which this one joins (unless ``new`` or ``active``); None: create a session."""
        propagation.install()
        outer = current_session()
        if outer is not None and not self.new and self.given is None:
            self.active = outer
            return outer
        return None

    def _begin(self, created: Any) -> ActiveSession:
        """The session the gateway created (its POST /sessions answer), made current."""
        self.active, self._owner = as_session(created), True
        self._enter_context()
        return self.active

    def _run_in_given(self) -> ActiveSession:
        self.active = self.given
        self._enter_context()
        return self.active  # type: ignore[return-value]

    def _finish_failed(self, err: Exception, exc: BaseException | None) -> None:
        """Finishing the session failed: raise that, unless the body already raised (then only log)."""
        if exc is None:
            raise err
        log.warning("could not mark session %s failed: %s", self.active.id if self.active else "?", err)

    def _outcome(self, exc: BaseException | None) -> tuple[str, float | None, str | None]:
        if exc is None:
            return "finished", self.reward, None
        return "failed", None, failure_error_text(exc)  # the failure kind first (agentr1.sdk.failures)

    def _enter_context(self) -> None:
        assert self.active is not None
        self._token = set_current(self.active)
        tracer = _tracer()
        if tracer is not None:
            attributes = {"agentr1.session": self.active.id, "agentr1.task_id": self.active.task_id or "",
                          "agentr1.group_id": self.active.group_id or "", "agentr1.run_id": self.active.run_id or ""}
            self._span = tracer.start_as_current_span("agentr1.session", attributes=attributes)
            self._span.__enter__()

    def _exit_context(self, exc: BaseException | None) -> None:
        if self._span is not None:
            self._span.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
        reset_current(self._token)


def fail_session(active: ActiveSession, kind: str, text: str) -> None:
    """Finish ``active`` as failed, its error of failure ``kind`` (:data:`FAILURE_KINDS`), from outside the code
    that ran it: a supervisor whose worker process died with the session open (``agent.processes``)."""
    method, path, sess, body = finish_call(active, "failed", None, tagged_error(kind, text))
    request(method, path, sess, json=body)


def reward(value: float, *, name: str = "reward", step: int | str | None = None, source: str = "agent",
           anchor: str | None = None) -> None:
    """Report a reward for the current session: the whole session (``step=None``), one step by
    index, or ``step="last"`` for the newest step the gateway answered in this session.
    ``anchor``: also record that text as the step's anchor state (:func:`agentr1.sdk.anchor`), in the
    same request; both are stored or neither."""
    learn_last_step(step)
    method, path, sess, body = _reward_with_anchor(value, name, step, source, anchor)
    request(method, path, sess, json=body)


async def areward(value: float, *, name: str = "reward", step: int | str | None = None,
                  source: str = "agent", anchor: str | None = None) -> None:
    """:func:`reward` for async code (does not block the event loop)."""
    await alearn_last_step(step)
    method, path, sess, body = _reward_with_anchor(value, name, step, source, anchor)
    await arequest(method, path, sess, json=body)


def _reward_with_anchor(value: float, name: str, step: int | str | None, source: str,
                        anchor: str | None) -> tuple[Any, ...]:
    method, path, sess, body = step_reward_call(value, name, step, source)
    if anchor is None:
        return method, path, sess, body
    return method, path, sess, [anchor_call(anchor, step)[3], body]


def _resolve(field: Field, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return field(*args, **kwargs) if callable(field) else field


def _outcome_reward(result: Any) -> float | None:
    if isinstance(result, bool) or not isinstance(result, int | float):
        return None
    return float(result)


@overload
def rollout(fn: F) -> F: ...
@overload
def rollout(*, task_id: Field = None, group_id: Field = None, run_id: Field = None,
            metadata: Field = None, new: bool = False) -> Callable[[F], F]: ...


def rollout(fn: F | None = None, *, task_id: Field = None, group_id: Field = None, run_id: Field = None,
            metadata: Field = None, new: bool = False) -> Any:
    """Run each call of ``fn`` (sync or async) as one session. ``task_id``, ``group_id``, ``run_id``
    and ``metadata`` are values or functions of the call's arguments. A number returned by ``fn``
    is the session's outcome reward; an exception marks the session failed and propagates."""

    def wrap(func: F) -> F:
        def open_session(args: tuple[Any, ...], kwargs: dict[str, Any]) -> session:
            return session(task_id=_resolve(task_id, args, kwargs), group_id=_resolve(group_id, args, kwargs),
                           run_id=_resolve(run_id, args, kwargs), metadata=_resolve(metadata, args, kwargs), new=new)

        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                s = open_session(args, kwargs)
                async with s:
                    result = await func(*args, **kwargs)
                    s.reward = _outcome_reward(result)
                return result

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            s = open_session(args, kwargs)
            with s:
                result = func(*args, **kwargs)
                s.reward = _outcome_reward(result)
            return result

        return wrapper  # type: ignore[return-value]

    return wrap(fn) if fn is not None else wrap


def _require() -> ActiveSession:
    active = current_session()
    if active is None:
        raise NoActiveSession("no active session: call this inside @rollout or `with session(...)`")
    return active


def base_url() -> str:
    """The OpenAI base_url of the current session."""
    return _require().base_url


def api_key() -> str:
    """The API key of the current session."""
    return _require().api_key


def openai_client(**kwargs: Any) -> Any:
    """An ``openai.OpenAI`` client bound to the current session (its own connection pool, the SDK's
    shared TLS context: building a context per client blocks for 10-130 ms, see ``client``)."""
    import openai

    active = _require()
    kwargs.setdefault("http_client", openai.DefaultHttpxClient(verify=shared_ssl_context()))
    return openai.OpenAI(base_url=active.base_url, api_key=active.api_key, **kwargs)


def async_openai_client(**kwargs: Any) -> Any:
    """An ``openai.AsyncOpenAI`` client bound to the current session (as :func:`openai_client`)."""
    import openai

    active = _require()
    kwargs.setdefault("http_client", openai.DefaultAsyncHttpxClient(verify=shared_ssl_context()))
    client = openai.AsyncOpenAI(base_url=active.base_url, api_key=active.api_key, **kwargs)
    if getattr(client, "_platform", False) is None:  # (an openai without it: nothing to do)
        client._platform = _openai_platform()
    return client


@functools.lru_cache(maxsize=1)
def _openai_platform() -> Any:
    """What the openai client sends as its platform headers, found once per process. A new ``AsyncOpenAI``
    looks it up at its first request on a worker thread (``asyncify(get_platform)``): with a client per
    session, that thread hop was 13% of the agents' event loop in a 64-session rollout (py-spy, GIL
    samples, ``bench/rollout_bench.py``)."""
    from openai._base_client import get_platform

    return get_platform()
