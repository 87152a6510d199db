"""`agentr1 view`: a local web app over the trace store (runs, sessions, steps token by token, task
groups with advantages, training curves from the trainer's output folders, a chat page)."""

from __future__ import annotations

import logging

import typer


def view(
    db: str | None = typer.Option(None, "--db", envvar="AGENTR1_DB", show_default="agentr1.store.DEFAULT_DB, agentr1.db here",
                                  help="Trace store URL or SQLite path."),
    runs_dir: str | None = typer.Option(None, "--runs-dir", envvar="AGENTR1_RUNS_DIR",
                                        help="Trainer output folders (metrics.jsonl, checkpoints/), e.g. out/."),
    tokenizer: str | None = typer.Option(None, "--tokenizer",
                                         help="Model directory to decode token ids with (default: the cached "
                                              "model the steps name, if any)."),
    gateway: str | None = typer.Option(None, "--gateway", envvar="AGENTR1_GATEWAY",
                                       help="Gateway URL for the chat page, e.g. http://127.0.0.1:8000."),
    model: str | None = typer.Option(None, "--model", help="Model name for the chat page (default: the gateway's)."),
    estimator: str = typer.Option("grpo", "--estimator", help="Advantage estimator shown on group pages."),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8300, "--port", envvar="AGENTR1_VIEW_PORT"),
    log_level: str = typer.Option("warning", "--log-level"),
) -> None:
    """Browse recorded traces at http://HOST:PORT (reads the store; never writes it)."""
    try:
        import uvicorn

        from agentr1.store import DEFAULT_DB, StoreError, TraceStore
        from agentr1.viewer import ViewerSettings, create_viewer_app
    except ModuleNotFoundError as exc:
        typer.secho(f"error: the viewer needs `pip install 'agentr1[gateway]'` ({exc.name} missing)", fg="red",
                    err=True)
        raise typer.Exit(2) from exc
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    db = db or DEFAULT_DB
    try:
        store = TraceStore.open(db, migrate=False)
    except StoreError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    settings = ViewerSettings(db=db, runs_dir=runs_dir, tokenizer=tokenizer, gateway_url=gateway, model=model,
                              estimator=estimator)
    try:  # the group pages' advantages: the trainer's estimators (the viewer imports no trainer)
        from agentr1.trainer import GroupAdvantages

        advantages = GroupAdvantages()
    except ImportError:
        advantages = None
    shown = store.engine.url.render_as_string(hide_password=True)
    typer.echo(f"agentr1 viewer on http://{host}:{port}  (store {shown})")
    try:
        uvicorn.run(create_viewer_app(settings, store=store, advantages=advantages), host=host, port=port, log_level=log_level)
    finally:
        store.close()
