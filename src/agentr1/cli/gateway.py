"""`agentr1 gateway`: serve the policy behind an OpenAI-compatible endpoint that records traces.

Its flags are the fields of :class:`agentr1.gateway.GatewaySettings` (derived by
:func:`agentr1.cli.options.settings_command`: one declaration of each setting, its help and its
default; a group's settings as group + field, ``--engine-dtype``, ``--launch-servers``), plus
``--otlp-endpoint`` and ``--log-level``, which are this process's, not the gateway's."""

from __future__ import annotations

import logging
import signal
from typing import Any

import typer
from pydantic import BaseModel

from agentr1.cli.options import given, settings_command, settings_from

__all__ = ["gateway"]

# flags whose names are not the setting's path (kept from earlier releases; bools with their own negation)
FLAGS = {
    "backend_urls": "--backend-url",
    "auth.admin_key": "--admin-key",
    "auth.api_key": "--api-key",
    "auth.run_keys": "--run-key",
    "auth.max_concurrent_per_key": "--max-concurrent-per-key",
    "auto_session": "--auto-session/--require-session",
    "write.durable": "--durable-writes/--fast-writes",
    "launch.enabled": "--launch/--no-launch",
    "launch.timeout_s": "--launch-timeout",
}
EXTRA = {
    "otlp_endpoint": (str | None, typer.Option(None, "--otlp-endpoint", envvar="AGENTR1_OTLP_ENDPOINT",
                                               help="Export a span per step over OTLP/HTTP (needs agentr1[otel]).")),
    "log_level": (str, typer.Option("info", "--log-level")),
}


def gateway(**options: Any) -> None:
    """Start the gateway (uvicorn). Agents point their OpenAI base_url at http://HOST:PORT/v1."""
    try:
        import uvicorn

        from agentr1.gateway import GatewaySettings, create_app, uvicorn_options
    except ModuleNotFoundError as exc:
        typer.secho(f"error: the gateway needs `pip install 'agentr1[gateway]'` ({exc.name} missing)", fg="red", err=True)
        raise typer.Exit(2) from exc
    values = given(GatewaySettings, options)
    if "run_keys" in values.get("auth", {}):
        values["auth"]["run_keys"] = _run_keys(values["auth"]["run_keys"])
    settings = settings_from(GatewaySettings, values, FLAGS)
    if settings.launch.enabled and (settings.backend != "sglang" or settings.backend_urls):
        typer.secho("error: --launch starts SGLang servers: use it with --backend sglang and without --backend-url",
                    fg="red", err=True)
        raise typer.Exit(2)
    if settings.backend in ("sglang", "vllm") and not settings.backend_urls and not settings.launch.enabled:
        typer.secho(f"error: --backend {settings.backend} needs --backend-url (each server's address)", fg="red",
                    err=True)
        raise typer.Exit(2)
    # lazy: the gateway extra (fastapi, torch) stays off --help
    from agentr1.gateway import ContextPolicyError, build_policy

    try:
        build_policy(settings.context_policy)
    except ContextPolicyError as exc:
        typer.secho(f"error: --context-policy: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    if settings.tool_call_parser is not None:
        from agentr1.core.rendering import get_tool_call_parser  # lazy, as above

        try:
            get_tool_call_parser(settings.tool_call_parser)
        except ValueError as exc:
            typer.secho(f"error: --tool-call-parser: {exc}", fg="red", err=True)
            raise typer.Exit(2) from exc
    logging.basicConfig(level=options["log_level"].upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if options["otlp_endpoint"]:
        # lazy: the gateway extra stays off --help
        from agentr1.gateway import configure_otlp

        configure_otlp(options["otlp_endpoint"])
    launcher = None
    if settings.launch.enabled:  # uvicorn re-raises SIGTERM after its shutdown: end at `except` instead, servers stopped below
        signal.signal(signal.SIGTERM, _terminated)
    try:
        if settings.launch.enabled:
            launcher = _launch(settings)
            settings = settings.model_copy(update={"backend_urls": launcher.urls})
        uvicorn.run(create_app(settings), host=settings.host, port=settings.port,
                    **uvicorn_options(settings, log_level=options["log_level"]))
    except _Terminated:
        pass
    finally:
        if launcher is not None:
            launcher.stop()
    if launcher is not None and launcher.error is not None:
        typer.secho(f"error: {launcher.error}", fg="red", err=True)
        raise typer.Exit(1)


class _NoSettings(BaseModel):
    """The base install has no gateway: `agentr1 gateway` then only says what to install."""


def _settings_model() -> type[BaseModel]:
    try:
        from agentr1.gateway import GatewaySettings
    except ModuleNotFoundError:
        return _NoSettings
    return GatewaySettings


settings_command(_settings_model(), gateway, flags=FLAGS, extra=EXTRA)


class _Terminated(Exception):
    """SIGTERM arrived (uvicorn has shut down): stop the launched servers, then exit."""


def _terminated(signum: int, frame: Any) -> None:
    raise _Terminated


def _launch(settings: Any) -> Any:
    """Start the SGLang servers of ``--launch`` and wait until they are healthy (docs/backends.md).
    If supervision later gives up on one, the gateway is stopped (SIGTERM to itself)."""
    import os

    # lazy: the gateway extra stays off --help
    from agentr1.gateway.backends import LaunchError, launch_servers

    def stop_gateway(error: LaunchError) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    try:
        return launch_servers(settings, on_give_up=stop_gateway)
    except (LaunchError, ValueError) as exc:
        typer.secho(f"error: --launch: {exc}", fg="red", err=True)
        raise typer.Exit(1) from exc


def _run_keys(pairs: list[str]) -> dict[str, str]:
    """``--run-key RUN=KEY`` flags as the settings' ``{run: key}``; a malformed one is a usage error."""
    keys: dict[str, str] = {}
    for pair in pairs:
        run, sep, key = pair.partition("=")
        if not sep or not run or not key:
            raise typer.BadParameter(f"{pair!r} must look like RUN=KEY", param_hint="--run-key")
        keys[run] = key
    return keys
