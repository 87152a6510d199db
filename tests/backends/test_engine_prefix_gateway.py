"""Prefix reuse through a real gateway: an 8-turn agent session (the real openai client, uvicorn,
SQLite) prefills about its final context once in total instead of its whole history every turn,
and samples exactly what a run without reuse samples (the tiny random model; SmolLM2 when slow)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from agentr1.engine import EngineOptions
from agentr1.gateway.app import create_app
from agentr1.gateway.backends import LocalBackend
from agentr1.gateway.server import BackgroundServer
from agentr1.gateway.settings import GatewaySettings
from agentr1.store import TraceStore

TURNS = 8


def agent_session(model: Path, db: Path, *, prefix_cache: bool, max_tokens: int, **sampling: Any) -> tuple[Any, Any]:
    """Run one 8-turn chat session through a gateway on the local engine; (trace, engine stats)."""
    backend = LocalBackend(model, EngineOptions(device="cpu", dtype="float32", threads=1,
                                                prefix_cache=prefix_cache))
    store = TraceStore.open(str(db))
    app = create_app(GatewaySettings(db=str(db), accept_any_model=True), store=store, backend=backend)
    try:
        with BackgroundServer(app) as url:
            session = httpx.post(f"{url}/sessions", json={"task_id": "count"}).json()
            client = openai.OpenAI(base_url=session["base_url"], api_key=session["api_key"])
            messages = [{"role": "system", "content": "You are a patient counting assistant."},
                        {"role": "user", "content": "Let us count together. Say the first number."}]
            for turn in range(TURNS):
                reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=max_tokens,
                                                       **sampling)
                messages += [reply.choices[0].message.model_dump(exclude_none=True),
                             {"role": "user", "content": f"Good. Now the number after that ({turn})."}]
            trace = store.get_session(session["id"])
    finally:
        store.close()
        asyncio.run(backend.close())
    return trace, backend.stats


def check_reuse(model: Path, tmp_path: Path, max_tokens: int, **sampling: Any) -> None:
    tmp_path.mkdir(parents=True, exist_ok=True)
    reused, stats = agent_session(model, tmp_path / "reused.db", prefix_cache=True, max_tokens=max_tokens, **sampling)
    plain, plain_stats = agent_session(model, tmp_path / "plain.db", prefix_cache=False, max_tokens=max_tokens,
                                       **sampling)
    assert len(reused.steps) == len(plain.steps) == TURNS
    for a, b in zip(reused.steps, plain.steps, strict=True):
        assert a.observation_ids == b.observation_ids
        assert a.action_ids == b.action_ids
        assert a.action_logprobs == b.action_logprobs  # bit-exact: reuse changes nothing sampled
    for earlier, later in zip(reused.steps, reused.steps[1:], strict=False):  # each turn extends the previous one
        assert later.observation_ids[: len(earlier.observation_ids) + len(earlier.action_ids)] == (
            earlier.observation_ids + earlier.action_ids)
    final = reused.steps[-1]
    context = len(final.observation_ids) + len(final.action_ids)
    assert stats.prefill_tokens <= 1.3 * context, (stats.prefill_tokens, context)
    assert plain_stats.prefill_tokens == sum(len(s.observation_ids) for s in plain.steps)  # every turn in full
    assert stats.cached_tokens > 0.6 * plain_stats.prefill_tokens


def test_eight_turn_session_prefills_its_context_about_once_tiny_model(tiny_model_path, tmp_path):
    check_reuse(tiny_model_path, tmp_path, max_tokens=16, temperature=0.0)
    check_reuse(tiny_model_path, tmp_path / "sampled", max_tokens=16, temperature=1.0, top_p=0.9, seed=7)


@pytest.mark.slow
def test_eight_turn_session_prefills_its_context_about_once_smollm2(smollm2_path, tmp_path):
    check_reuse(smollm2_path, tmp_path, max_tokens=24, temperature=0.0)
