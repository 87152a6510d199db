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
    monkeypatch.delenv("AGENTR1_AUTH__RUN_KEYS", raising=False)
    result, settings = _cli(monkeypatch, "--run-key", "exp-a=key-a", "--run-key", "exp-b=key=b", "--abandon-idle-s", "90")
    assert result.exit_code == 0, result.output
    assert settings.auth.run_keys == {"exp-a": "key-a", "exp-b": "key=b"} and settings.abandon_idle_s == 90
    monkeypatch.setenv("AGENTR1_AUTH__RUN_KEYS", '{"exp-c": "key-c"}')  # no flag: the environment's keys stay
    result, settings = _cli(monkeypatch)
    assert result.exit_code == 0 and settings.auth.run_keys == {"exp-c": "key-c"} and settings.abandon_idle_s == 0


def test_bad_run_key_exits_2(monkeypatch):
    for bad in ("exp-a", "=key", "exp-a="):
        result, settings = _cli(monkeypatch, "--run-key", bad)
        assert result.exit_code == 2 and "must look like RUN=KEY" in result.output and settings is None


def test_help_lists_each_group_setting_as_group_and_field(monkeypatch):
    """The flags of the settings' groups are derived from their fields: --engine-<knob> for every engine option,
    the launch, image and write groups under their names, the auth keys under the names they always had."""
    from agentr1.engine import EngineOptions

    result = CliRunner().invoke(_app(), ["--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    engine_flags = [f"--engine-{name.replace('_', '-')}" for name in EngineOptions.model_fields]
    for flag in [*engine_flags, "--launch", "--launch-servers", "--launch-timeout", "--image-max-bytes",
                 "--write-batch-size", "--durable-writes", "--admin-key", "--run-key"]:
        assert flag in result.output, flag
    for old in ("--cache-gb", "--prefill-budget", "--max-batch-size", "--device "):
        assert old not in result.output, old


def test_a_nested_setting_comes_from_its_flag_or_its_environment_variable(monkeypatch):
    monkeypatch.setenv("AGENTR1_ENGINE__CACHE_GB", "0.5")
    result, settings = _cli(monkeypatch, "--engine-dtype", "bfloat16", "--launch-servers", "2")
    assert result.exit_code == 0, result.output
    assert (settings.engine.dtype, settings.engine.cache_gb, settings.launch.servers) == ("bfloat16", 0.5, 2)


def test_a_bad_nested_value_and_an_old_flag_name_the_flag(monkeypatch):
    result, settings = _cli(monkeypatch, "--engine-prefill-budget", "8")
    assert result.exit_code == 2 and "--engine-prefill-budget" in result.output and settings is None
    result, settings = _cli(monkeypatch, "--cache-gb", "1")
    assert result.exit_code == 2 and "--engine-cache-gb" in result.output and settings is None


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(gateway)
    return app
