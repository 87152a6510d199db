"""`agentr1 traces`: inspect a trace store from the shell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from agentr1.store import TraceStore

app = typer.Typer(help="Inspect and export step traces.", no_args_is_help=True)

DB_OPTION = typer.Option(
    None, "--db", envvar="AGENTR1_DB", show_default="agentr1.store.DEFAULT_DB, agentr1.db here",
    help="Database URL or SQLite file path."
)


def _open(db: str | None, *, migrate: bool = False) -> TraceStore:
    try:
        from agentr1.store import DEFAULT_DB, StoreError, TraceStore
    except ModuleNotFoundError as exc:
        raise typer.BadParameter(f"the trace store needs `pip install 'agentr1[store]'` ({exc.name} missing)") from exc
    try:
        return TraceStore.open(db or DEFAULT_DB, migrate=migrate)
    except StoreError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


@app.command()
def migrate(db: str | None = DB_OPTION) -> None:
    """Create the schema or bring it to the newest version."""
    with _open(db, migrate=True) as store:
        typer.echo(f"{store.engine.url.render_as_string(hide_password=True)}: schema up to date")


@app.command()
def runs(db: str | None = DB_OPTION, limit: int = typer.Option(50, help="Newest runs to list.")) -> None:
    """List runs with their session and step counts."""
    with _open(db) as store:
        typer.echo(f"{'run':34} {'name':24} {'sessions':>8} {'steps':>8} {'reward':>8}  created")
        for r in store.list_runs(limit):
            created = r.created_at.strftime("%Y-%m-%d %H:%M") if r.created_at else ""
            typer.echo(f"{r.id:34} {r.name[:24]:24} {r.n_sessions:>8} {r.n_steps:>8} {_fmt(r.mean_reward):>8}  {created}")


@app.command()
def sessions(
    db: str | None = DB_OPTION,
    run: str | None = typer.Option(None, help="Only this run."),
    status: str | None = typer.Option(None, help="running, finished, failed or abandoned."),
    limit: int = typer.Option(50),
) -> None:
    """List sessions (trajectories)."""
    with _open(db) as store:
        typer.echo(f"{'session':34} {'status':9} {'task':16} {'group':16} {'steps':>5} {'reward':>8}")
        for s in store.list_sessions(run, status=status, limit=limit):
            typer.echo(f"{s.id:34} {s.status:9} {(s.task_id or '-')[:16]:16} {(s.group_id or '-')[:16]:16} "
                       f"{s.n_steps:>5} {_fmt(s.reward):>8}")


@app.command()
def show(
    session_id: str = typer.Argument(..., help="Session id."),
    db: str | None = DB_OPTION,
    tokenizer: str | None = typer.Option(None, help="Tokenizer (local path) to decode token ids (default: the model "
                                                    "directory that served the steps, as they recorded it)."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole trace as JSON."),
) -> None:
    """Show one session step by step."""
    # lazy: the store extra (SQLAlchemy) stays off --help
    from agentr1.store import UnknownSession

    with _open(db) as store:
        try:
            record = store.get_session(session_id)
        except UnknownSession as exc:
            typer.secho(f"error: {exc}", fg="red", err=True)
            raise typer.Exit(1) from exc
    if as_json:
        typer.echo(json.dumps(record.to_dict(), default=str, indent=2))
        return
    served = next((s.model_path for s in record.steps if s.model_path and Path(s.model_path).is_dir()), None)
    decode = _decoder(tokenizer or served)
    typer.echo(f"session {record.id}  status={record.status}  run={record.run_id}  task={record.task_id}  "
               f"group={record.group_id}  reward={_fmt(record.reward)}")
    if record.error:
        typer.echo(f"error: {record.error}")
    for step in record.steps:
        flags = " DRIFT" if step.drift else ""
        typer.secho(f"\n-- step {step.index}  policy v{step.policy_version}  {len(step.observation_ids)} obs / "
                    f"{len(step.action_ids)} action tokens  finish={step.finish_reason}  "
                    f"reward={_fmt(step.reward)}{flags}", bold=True)
        if decode:
            typer.echo("observation (tail): " + decode(step.observation_ids[-80:]))
            typer.echo("action: " + decode(step.action_ids))
        else:
            typer.echo(f"action: {step.action.get('content')!r}")
        for call in step.action.get("tool_calls") or []:
            typer.echo(f"tool call: {json.dumps(call)}")
        if step.feedback_messages:
            typer.echo("feedback: " + json.dumps(step.feedback_messages)[:500])


def _decoder(tokenizer: str | None) -> Any:
    if tokenizer is None:
        return None
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    return lambda ids: repr(tok.decode(ids, skip_special_tokens=False))


@app.command()
def export(
    out: str = typer.Argument(..., help="Output file, .jsonl or .parquet."),
    db: str | None = DB_OPTION,
    run: str | None = typer.Option(None, help="Run to export (default: all sessions)."),
    fmt: str | None = typer.Option(None, "--format", help="jsonl or parquet (default: from the file name)."),
) -> None:
    """Export a run's sessions and steps."""
    # lazy: the store extra stays off --help
    from agentr1.store import export_run

    with _open(db) as store:
        try:
            n = export_run(store, run, out, fmt=fmt)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from exc
    typer.echo(f"wrote {n} sessions to {out}")
