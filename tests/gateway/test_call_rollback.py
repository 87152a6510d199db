"""A call whose steps are not stored leaves its session as it found it: every field, by construction.

The session's history (:class:`CallHistory`) changes only inside ``SessionRegistry.recording``, which snapshots and
restores all of its fields. The tests go over the fields themselves (``dataclasses.fields``), so a field added later is
checked without changing them: each field changed inside a failing transaction, by assignment and in place, comes back;
and a real call whose write fails leaves every field of its ``SessionState`` as it was.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from typing import Any

import httpx
import pytest

from agentr1.core.rendering import PreviousTurn, load_renderer
from agentr1.gateway.app import create_app
from agentr1.gateway.backends.instant import InstantBackend
from agentr1.gateway.call_history import CallHistory
from agentr1.gateway.server import BackgroundServer
from agentr1.gateway.sessions import SessionRegistry, SessionState
from agentr1.gateway.settings import GatewaySettings
from agentr1.store import StoreError, TraceStore


def _turn(index: int) -> tuple[int, PreviousTurn]:
    return index, PreviousTurn(messages=[{"role": "user", "content": f"q{index}"}], tools=None,
                               prompt_ids=[1, 2, index], action_ids=[index], assistant_message={"role": "assistant"},
                               prefill="")


def _changed(value: Any) -> Any:
    """Another value of the same kind; lists are changed in place (the snapshot must not share them)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if value is None:
        return 0
    if isinstance(value, list):
        value.append(_turn(99) if value and isinstance(value[0], tuple) else 99)
        return value
    raise AssertionError(f"no change known for a {type(value).__name__}: teach _changed this field's kind")


class _Failed(Exception):
    pass


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(CallHistory)])
def test_a_failed_transaction_restores_each_field_of_the_history(tmp_path, name: str) -> None:
    with TraceStore.open(f"sqlite:///{tmp_path / 'r.db'}") as store:
        registry = SessionRegistry(store, auto_session=False, default_run="r")
        history = CallHistory(next_index=3, previous=[_turn(2)], previous_parent=1, previous_drift=False,
                              last_call=[2], recent=[_turn(1), _turn(2)])
        state = SessionState(id="s", run_id="r", status="running", history=history)
        before = copy.deepcopy(history)

        async def fail_inside() -> None:
            async with registry.recording(state) as recorded:
                setattr(recorded, name, _changed(getattr(recorded, name)))
                assert getattr(recorded, name) != getattr(before, name)
                raise _Failed

        with pytest.raises(_Failed):
            asyncio.run(fail_inside())
        assert getattr(state.history, name) == getattr(before, name)
        assert state.history == before and not state.lock.locked()


@pytest.fixture(scope="module")
def renderer(tiny_model_path):
    return load_renderer(tiny_model_path)


def _state_fields(state: SessionState) -> dict[str, Any]:
    """Each field's value (copied, so later changes in place show), the lock by identity."""
    return {f.name: getattr(state, f.name) if f.name == "lock" else copy.deepcopy(getattr(state, f.name))
            for f in dataclasses.fields(state)}


def test_a_call_whose_write_fails_leaves_every_field_of_its_session_as_it_was(tmp_path, renderer) -> None:
    db = f"sqlite:///{tmp_path / 'gw.db'}"
    store = TraceStore.open(db)
    writes_fail = False
    for method in ("append_steps", "try_append_steps"):
        real = getattr(store, method)

        def failing(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if writes_fail:
                raise StoreError("the database is down")
            return _real(*args, **kwargs)

        setattr(store, method, failing)
    backend = InstantBackend(renderer.tokenizer, "four", model_name="policy")
    app = create_app(GatewaySettings(model="tiny", db=db, accept_any_model=True), store=store, backend=backend,
                     renderer=renderer)
    try:
        with BackgroundServer(app) as url:
            created = httpx.post(f"{url}/sessions", json={}).json()

            def call(messages: list[dict[str, Any]]) -> httpx.Response:
                return httpx.post(f"{created['base_url']}/chat/completions", timeout=30,
                                  json={"model": "policy", "messages": messages, "max_tokens": 4})

            messages = [{"role": "user", "content": "hi"}]
            for question in ("and again?", "once more?"):  # two stored calls: the history is far from its defaults
                answer = call(messages).json()["choices"][0]["message"]
                messages = [*messages, answer, {"role": "user", "content": question}]
            state = app.state.gateway.sessions._states[created["id"]]
            before = _state_fields(state)
            writes_fail = True
            refused = call(messages)
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "store_unavailable"
            after = _state_fields(state)
            for name, value in before.items():
                assert after[name] == value if name != "lock" else after[name] is value, f"{name} escaped the rollback"
            writes_fail = False
            assert call(messages).status_code == 200  # the agent's retry is stored at the index the failure left
            assert state.history.next_index == before["history"].next_index + 1 and state.history != before["history"]
    finally:
        store.close()
    with TraceStore.open(db) as reopened:
        assert [s.index for s in reopened.get_session(created["id"]).steps] == [0, 1, 2]
