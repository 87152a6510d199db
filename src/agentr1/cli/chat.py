"""`agentr1 chat`: talk to the policy through a gateway in the terminal. One session per
conversation (its id is printed), one recorded step per model call; tools run locally."""

from __future__ import annotations

from typing import Any

import typer

HELP = "/reset starts a new session, /quit ends (Ctrl-D too)"


def _show(message: dict[str, Any]) -> None:
    if message.get("role") == "tool":
        typer.secho(f"  [tool result] {message.get('content')}", fg="yellow")
        return
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        typer.secho(f"  [tool call] {fn.get('name')}({fn.get('arguments')})", fg="yellow")
    if message.get("content"):
        typer.secho("policy> ", fg="green", bold=True, nl=False)
        typer.echo(message["content"])


def chat(
    gateway: str = typer.Option("http://127.0.0.1:8000", "--gateway", envvar="AGENTR1_GATEWAY", help="Gateway URL."),
    model: str | None = typer.Option(None, "--model", help="Model name (default: the gateway's first model)."),
    tools: list[str] = typer.Option([], "--tools", help="Tools to offer, run locally (calculator). Repeatable."),
    run: str = typer.Option("chat", "--run", help="Run the chat sessions are recorded in."),
    system: str | None = typer.Option(None, "--system", help="System prompt."),
    max_tokens: int = typer.Option(256, "--max-tokens"),
    temperature: float = typer.Option(0.7, "--temperature"),
) -> None:
    """Chat with the policy; every turn is a recorded step (see it with `agentr1 traces show` or `agentr1 view`)."""
    import httpx

    # the viewer's chat client: not loaded for other commands
    from agentr1.viewer import ChatError, GatewayChat

    names = [t.strip() for item in tools for t in item.split(",") if t.strip()]
    try:
        session = GatewayChat(gateway, model=model, tools=names, run_id=run, system=system, max_tokens=max_tokens,
                              temperature=temperature)
        session_id = session.new_session()
    except (ValueError, ChatError) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    except httpx.HTTPError as exc:
        typer.secho(f"error: cannot reach the gateway at {gateway}: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    offered = f", tools {', '.join(names)}" if names else ""
    typer.echo(f"session {session_id} (run {run}, model {session.model}{offered})")
    typer.echo(HELP)
    try:
        while True:
            try:
                text = input("you> ")
            except EOFError:
                break
            command = text.strip()
            if not command:
                continue
            if command in ("/quit", "/exit", "/q"):
                break
            if command == "/reset":
                session.finish()
                typer.echo(f"session {session.new_session()} (new conversation)")
                continue
            if command == "/help":
                typer.echo(HELP)
                continue
            try:
                added = session.send(text, on_message=_show)
            except (ChatError, httpx.HTTPError) as exc:
                typer.secho(f"error: {exc}", fg="red", err=True)
                session.messages.pop()  # the user turn did not happen
                continue
            steps = sum(1 for m in added if m.get("role") == "assistant")
            typer.secho(f"  ({steps} step{'s' if steps != 1 else ''} recorded in session {session.session_id})",
                        fg="bright_black")
    except KeyboardInterrupt:
        typer.echo()
    finally:
        ended = session.session_id
        session.close()
        if ended:
            typer.echo(f"session {ended} finished; show it with `agentr1 traces show {ended}`")


__all__ = ["chat"]
