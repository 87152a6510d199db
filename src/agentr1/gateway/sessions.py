"""Which session (trajectory) a call belongs to, and the per-session state the gateway keeps.

A call is attributed, in this order, by: the session in the URL path (`/sessions/{id}/v1/...`),
the `X-Agentr1-Session` header, the `agentr1.session` entry of W3C `baggage`, or a per-session
API key (`Authorization: Bearer a1s-...`). Calls with none of these go to an auto-created session
(``auto_session``) that later calls continuing the same conversation join, or are refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import re
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from starlette.requests import Request

from agentr1.core.rendering import canonical_message
from agentr1.gateway.call_history import CallHistory
from agentr1.gateway.errors import APIError
from agentr1.gateway.sampling_override import SamplingOverride, sampling_override
from agentr1.store import (
    NewSession,
    SessionEnd,
    SessionExists,
    StoreError,
    TraceStore,
    UnknownSession,
)

SESSION_HEADER = "x-agentr1-session"
PARENT_SESSION_HEADER = "x-agentr1-parent-session"  # a sub-agent's session names the session that started it
BAGGAGE_KEY = "agentr1.session"
KEY_PREFIX = "a1s-"
MAX_CACHED_SESSIONS = 20_000
MAX_AUTO_CANDIDATES = 4_096
SESSION_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # as POST /sessions accepts them


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_session_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(24)


@dataclass
class SessionState:
    id: str
    run_id: str | None
    status: str
    history: CallHistory = field(default_factory=CallHistory)  # changed by calls only in SessionRegistry.recording
    auto: bool = False
    implicit: bool = False  # created by a call (auto, or named in a URL), not by POST /sessions: see discard_unused
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # taken by a call to plan its prompt and to record
    in_flight: int = 0  # calls of this session between attribution and their end (streamed ones included)
    sampling: SamplingOverride | None = None  # how every call of the session is decoded (metadata "sampling")


def _prefix_keys(messages: list[dict[str, Any]]) -> list[str]:
    """keys[k] identifies the conversation messages[:k + 1]; linear in the conversation's size."""
    hasher, keys = hashlib.sha256(), []
    for message in messages:
        hasher.update(json.dumps(canonical_message(message), sort_keys=True, separators=(",", ":")).encode())
        hasher.update(b"\x1e")
        keys.append(hasher.copy().hexdigest())
    return keys


class SessionRegistry:
    def __init__(self, store: TraceStore, *, auto_session: bool, default_run: str) -> None:
        self.store = store
        self.auto_session = auto_session
        self.default_run = default_run
        self._states: OrderedDict[str, SessionState] = OrderedDict()
        self._keys: dict[str, str] = {}  # key hash -> session id
        self._auto_by_conversation: OrderedDict[str, str] = OrderedDict()  # history hash -> auto session
        self._create_lock = asyncio.Lock()
        self.max_cached = MAX_CACHED_SESSIONS  # session states kept in memory (least recently used go first)

    # -- lifecycle ---------------------------------------------------------------------------

    async def create(self, *, run_id: str | None = None, task_id: str | None = None, group_id: str | None = None,
                     metadata: dict[str, Any] | None = None, session_id: str | None = None,
                     policy_version: int = 0, auto: bool = False,
                     implicit: bool = False) -> tuple[SessionState, str]:
        (created,) = await self.create_many([NewSession(run_id=run_id, task_id=task_id, group_id=group_id,
                                                        metadata=metadata, policy_version=policy_version,
                                                        session_id=session_id)], auto=auto, implicit=implicit)
        return created

    async def create_many(self, sessions: list[NewSession], *, auto: bool = False,
                          implicit: bool = False) -> list[tuple[SessionState, str]]:
        """Create ``sessions`` (run: the default one where none is given) in one store transaction, all or none (a
        409 ``session_exists`` if an id is taken); each one's state and key. ``implicit`` (auto sessions are): a
        call creates them, nobody is given their key."""
        implicit = implicit or auto
        overrides = [sampling_override(s.metadata) for s in sessions]  # a bad one is a 400 before anything is written
        keys = [new_session_key() for _ in sessions]
        hashes = [hash_key(key) for key in keys]
        sessions = [dataclasses.replace(s, run_id=s.run_id or self.default_run, key_hash=digest)
                    for s, digest in zip(sessions, hashes, strict=True)]
        try:
            ids = await _in_place_or_thread(lambda: self.store.try_create_sessions(sessions),
                                            lambda: self.store.create_sessions(sessions))
        except SessionExists as exc:
            raise APIError(409, str(exc), code="session_exists") from exc
        created = []
        for sid, session, key, digest, override in zip(ids, sessions, keys, hashes, overrides, strict=True):
            state = SessionState(id=sid, run_id=session.run_id, status="running", auto=auto, implicit=implicit,
                                 sampling=override)
            self._remember(state)
            if not implicit:
                self._keys[digest] = sid
            created.append((state, key))
        return created

    async def create_named(self, session_id: str, *, parent: str | None = None) -> None:
        """Create the session a call names in its URL (``/sessions/my-run-17/v1/...``) on first use; a concurrent
        first call creating it too is fine. ``parent``: the session of the agent that started this one (a
        sub-agent's ``X-Agentr1-Parent-Session`` header), kept as ``metadata["parent_session"]``."""
        if not SESSION_ID.fullmatch(session_id):
            raise APIError(400, f"a session id is 1-64 letters, digits or _.:- (got {session_id[:80]!r})",
                           code="invalid_session_id")
        try:
            metadata: dict[str, Any] = {"created_on_first_call": True}
            if parent:
                metadata["parent_session"] = parent[:64]
            await self.create(session_id=session_id, metadata=metadata, implicit=True)
        except APIError as exc:
            if exc.code != "session_exists":
                raise

    async def get(self, session_id: str) -> SessionState:
        state = self._states.get(session_id)
        if state is not None:
            self._states.move_to_end(session_id)
            return state
        try:
            record = await asyncio.to_thread(self.store.get_session, session_id, steps=False)
        except UnknownSession as exc:
            raise APIError(404, f"no session with id {session_id!r}", code="session_not_found") from exc
        last = await asyncio.to_thread(self.store.last_step, session_id)
        state = SessionState(
            id=record.id, run_id=record.run_id, status=record.status, history=CallHistory.after(last),
            auto=bool(record.metadata.get("auto")),
            implicit=bool(record.metadata.get("auto") or record.metadata.get("created_on_first_call")),
            sampling=sampling_override(record.metadata),
        )
        # Another request may have loaded it meanwhile: keep the first so there is one lock.
        existing = self._states.get(session_id)
        if existing is not None:
            return existing
        self._remember(state)
        return state

    async def finish(self, state: SessionState, status: str, *, reward: float | None, error: str | None) -> None:
        """End the session in the store (``SessionNotRunning`` if it already ended), then here."""
        (failure,) = await self.finish_many([(state, SessionEnd(state.id, status, reward, error))])
        if failure is not None:
            raise failure

    async def finish_many(self, ends: list[tuple[SessionState, SessionEnd]]) -> list[StoreError | None]:
        """End sessions in one store transaction; for each, None or why it could not end (``SessionNotRunning``:
        it had ended already), as :meth:`TraceStore.finish_sessions`."""
        records = [end for _, end in ends]
        failures: list[StoreError | None] = await _in_place_or_thread(
            lambda: self.store.try_finish_sessions(records), lambda: self.store.finish_sessions(records))
        ended = set()
        for (state, end), failure in zip(ends, failures, strict=True):
            if failure is None:
                state.status = end.status
                ended.add(state.id)
        if ended and self._auto_by_conversation:
            for conv, sid in list(self._auto_by_conversation.items()):
                if sid in ended:
                    del self._auto_by_conversation[conv]
        return failures

    async def discard_unused(self, state: SessionState) -> bool:
        """Forget and delete a session that a call created (:attr:`SessionState.implicit`) when no call of it is in
        flight and none stored a step: a refused call leaves nothing behind. Whether it did. The state is
        forgotten before the store is asked (in place, on the loop, with SQLite), so a later call of the same name
        finds the session anew or creates it again."""
        if not state.implicit or state.in_flight or state.history.next_index or state.status != "running":
            return False
        if self._states.get(state.id) is state:
            del self._states[state.id]
        state.status = "discarded"  # a call still holding this state (none should) is refused, not recorded
        return bool(await _in_place_or_thread(lambda: self.store.try_discard_session(state.id),
                                              lambda: self.store.discard_session(state.id)))

    @contextlib.asynccontextmanager
    async def recording(self, state: SessionState) -> AsyncIterator[CallHistory]:
        """A call's changes to its session's history, as one transaction: under the session's lock (concurrent calls
        of a session get distinct step indices; none plans against a step whose write is undecided), and undone
        whole when the block raises (the steps were not stored: the agent's retry takes the same indices and
        continues the last stored step, no gap, no false drift)."""
        async with state.lock:
            saved = state.history.snapshot()
            try:
                yield state.history
            except Exception:
                state.history.restore(saved)
                raise

    def _remember(self, state: SessionState) -> None:
        self._states[state.id] = state
        while len(self._states) > self.max_cached:
            oldest_id, oldest = next(iter(self._states.items()))
            if oldest.in_flight or oldest.lock.locked():
                self._states.move_to_end(oldest_id)
                break
            del self._states[oldest_id]

    # -- attribution -------------------------------------------------------------------------

    async def session_for_key(self, key: str) -> str | None:
        digest = hash_key(key)
        sid = self._keys.get(digest)
        if sid is None:
            sid = await asyncio.to_thread(self.store.session_for_key, digest)
            if sid is not None:
                self._keys[digest] = sid
        return sid

    async def resolve(self, request: Request, path_session: str | None,
                      messages: list[dict[str, Any]] | None, *, hint: str | None = None) -> SessionState:
        """The call's session; ``hint``: the session of the response it continues (``previous_response_id``),
        used when the call names none."""
        sid = explicit_session(request, path_session)
        if sid is None:
            key = _bearer(request)
            if key and key.startswith(KEY_PREFIX):
                sid = await self.session_for_key(key)
                if sid is None:
                    raise APIError(401, "unknown session key", code="invalid_api_key")
        sid = sid or hint
        if sid is not None:
            state = await self.get(sid)
        elif not self.auto_session:
            raise APIError(400, "this gateway needs a session: use base_url .../sessions/{id}/v1, the "
                                "X-Agentr1-Session header, or a session key (POST /sessions creates one)",
                           code="session_required")
        else:
            state = await self._auto(messages)
        if state.status != "running":
            raise APIError(409, f"session {state.id} is {state.status}; start a new session", code="session_finished")
        return state

    async def _auto(self, messages: list[dict[str, Any]] | None) -> SessionState:
        """An unattributed call joins the auto session whose conversation it continues, if any."""
        if messages:
            for key in reversed(_prefix_keys(messages)[:-1]):
                sid = self._auto_by_conversation.get(key)
                if sid is not None:
                    state = await self.get(sid)
                    if state.status == "running":
                        return state
        async with self._create_lock:
            state, _ = await self.create(metadata={"auto": True}, auto=True)
        return state

    def note_conversation(self, state: SessionState, messages: list[dict[str, Any]],
                          assistant: dict[str, Any]) -> None:
        """Remember an auto session's history, so the next call of the same conversation finds it."""
        if not state.auto:
            return
        self._auto_by_conversation[_prefix_keys([*messages, assistant])[-1]] = state.id
        while len(self._auto_by_conversation) > MAX_AUTO_CANDIDATES:
            self._auto_by_conversation.popitem(last=False)


async def _in_place_or_thread(try_in_place: Callable[[], Any], write: Callable[[], Any]) -> Any:
    """A store write on the event loop when the store need not wait for it (SQLite, its lock free: CPU only, as the
    step writer commits), else ``write`` on a thread: a thread would hold the GIL for that CPU all the same, and wait
    for it besides. ``try_in_place`` returns None when it declined."""
    done = try_in_place()
    return done if done is not None else await asyncio.to_thread(write)


def explicit_session(request: Request, path_session: str | None) -> str | None:
    """The session a call names: its URL path, the X-Agentr1-Session header or baggage (not a key)."""
    return path_session or request.headers.get(SESSION_HEADER) or _from_baggage(request.headers.get("baggage"))


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def _from_baggage(baggage: str | None) -> str | None:
    if not baggage:
        return None
    for member in baggage.split(","):
        key, _, value = member.partition("=")
        if key.strip() == BAGGAGE_KEY:
            return unquote(value.split(";", 1)[0].strip()) or None
    return None
