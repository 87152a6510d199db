"""`agentr1 gateway --backend ... --backend-url ...`: the flags reach GatewaySettings, bad ones exit 2."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from agentr1.cli.gateway import gateway


def _cli(monkeypatch, *args: str):
    seen: dict = {}
    monkeypatch.setattr("agentr1.gateway.create_app", lambda settings: seen.setdefault("settings", settings))
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: None)
    app = typer.Typer()
    app.command()(gateway)
    return CliRunner().invoke(app, list(args)), seen.get("settings")


def test_backend_flags_reach_the_settings(monkeypatch):
    result, settings = _cli(monkeypatch, "--backend", "sglang", "--backend-url", "http://gpu1:30000",
                            "--backend-url", "http://gpu2:30000", "--model", "/models/m")
    assert result.exit_code == 0, result.output
    assert (settings.backend, settings.backend_urls, settings.model) == \
           ("sglang", ["http://gpu1:30000", "http://gpu2:30000"], "/models/m")
    result, settings = _cli(monkeypatch)
    assert result.exit_code == 0 and (settings.backend, settings.backend_urls) == ("local", [])


def test_bad_backend_flags_exit_2(monkeypatch):
    for args, message in ((["--backend", "tgi"], "is not one of"),
                          (["--backend", "vllm"], "needs --backend-url")):
        result, settings = _cli(monkeypatch, *args)
        assert result.exit_code == 2 and message in result.output and settings is None


def test_run_keys_and_idle_abandon_flags_reach_the_settings(monkeypatch):
    monkeypatch.delenv("AGENTR1_RUN_KEYS", raising=False)
    result, settings = _cli(monkeypatch, "--run-key", "exp-a=key-a", "--run-key", "exp-b=key=b", "--abandon-idle-s", "90")
    assert result.exit_code == 0, result.output
    assert settings.run_keys == {"exp-a": "key-a", "exp-b": "key=b"} and settings.abandon_idle_s == 90
    monkeypatch.setenv("AGENTR1_RUN_KEYS", '{"exp-c": "key-c"}')  # no flag: the environment's keys stay
    result, settings = _cli(monkeypatch)
    assert result.exit_code == 0 and settings.run_keys == {"exp-c": "key-c"} and settings.abandon_idle_s == 0


def test_bad_run_key_exits_2(monkeypatch):
    for bad in ("exp-a", "=key", "exp-a="):
        result, settings = _cli(monkeypatch, "--run-key", bad)
        assert result.exit_code == 2 and "must look like RUN=KEY" in result.output and settings is None
