"""One ``EngineOptions`` from the settings to the engine: what ``agentr1 gateway``'s flags say is what the engine of
the ``local`` backend runs with, in this process and in an engine process of its own."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from agentr1.cli.gateway import gateway
from agentr1.core.generation import GenerateRequest, SamplingParams
from agentr1.engine import EngineOptions
from agentr1.gateway import GatewaySettings
from agentr1.gateway.backends import LocalBackend, local_backend

FLAGS = ("--engine-device", "cpu", "--engine-dtype", "float32", "--engine-max-batch-size", "3",
         "--engine-prefill-budget", "48", "--no-engine-exact", "--engine-threads", "1", "--engine-cache-gb", "0.25")
EXPECTED = EngineOptions(device="cpu", dtype="float32", max_batch_size=3, prefill_budget=48, exact=False,
                         threads=1, cache_gb=0.25)


def settings_of(monkeypatch: Any, model: Path, *flags: str) -> GatewaySettings:
    """The settings ``agentr1 gateway --model MODEL FLAGS`` serves with (the server itself not started)."""
    seen: dict[str, GatewaySettings] = {}
    monkeypatch.setattr("agentr1.gateway.create_app", lambda settings: seen.setdefault("settings", settings))
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: None)
    app = typer.Typer()
    app.command()(gateway)
    result = CliRunner().invoke(app, ["--model", str(model), *flags])
    assert result.exit_code == 0, result.output
    return seen["settings"]


def test_the_flags_become_one_options_object_that_the_engine_runs_with(monkeypatch, tiny_model_path):
    settings = settings_of(monkeypatch, tiny_model_path, *FLAGS)
    assert settings.engine == EXPECTED
    backend = local_backend(settings)
    assert isinstance(backend, LocalBackend) and backend.engine.options == EXPECTED
    backend.engine.start()
    try:
        batch = backend.engine.batch
        assert batch is not None
        assert (batch.max_batch_size, batch.prefill_budget, batch.exact, batch.cache_bytes) == (3, 48, False, 2**28)
        assert str(backend.engine.dtype) == "torch.float32" and backend.engine.device.type == "cpu"
    finally:
        asyncio.run(backend.close())


def test_the_defaults_are_the_engines_own(monkeypatch, tiny_model_path):
    assert settings_of(monkeypatch, tiny_model_path).engine == EngineOptions()


def test_an_engine_process_builds_its_engine_from_the_same_options(monkeypatch, tiny_model_path):
    """The child builds its engine from the options it is given: with a batch of 3, six requests sent together
    never run more than 3 rows at once (the child's counters come back with every result)."""
    settings = settings_of(monkeypatch, tiny_model_path, *FLAGS)
    backend = local_backend(settings, engine_process=True)
    backend.engine.start()

    async def six() -> list[Any]:
        requests = [GenerateRequest([1, 2, 3 + i], SamplingParams(max_new_tokens=8, temperature=0.0))
                    for i in range(6)]
        return await asyncio.gather(*(backend.generate(r) for r in requests))

    try:
        assert len(asyncio.run(six())) == 6
        backend.refresh_stats()
        assert backend.stats.max_batch_rows <= 3 and backend.stats.requests_finished == 6
    finally:
        asyncio.run(backend.close())
