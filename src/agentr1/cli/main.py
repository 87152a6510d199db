"""`agentr1` entry point. Subcommands import their heavy dependencies lazily, so `--help`
stays fast and works with only the base install."""

from __future__ import annotations

import sys
from importlib.metadata import version

import typer

from agentr1.cli.chat import chat
from agentr1.cli.evaluate import evaluate
from agentr1.cli.gateway import gateway
from agentr1.cli.models import app as models_app
from agentr1.cli.sft import sft
from agentr1.cli.traces import app as traces_app
from agentr1.cli.train import train
from agentr1.cli.view import view
from agentr1.core import keep_freed_memory, preload_jemalloc

app = typer.Typer(
    name="agentr1",
    help="Train the LLM agents you already have with step-level RL.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(traces_app, name="traces")
app.add_typer(models_app, name="models")
app.command(help="Serve the policy model behind an OpenAI-compatible, trace-recording endpoint.")(gateway)
app.command(help="Train the policy on the agent's traces (rollout -> reward -> replay -> update).")(train)
app.command("eval", help="Evaluate a checkpoint: greedy@1, mean@K, pass@K, maj@K with intervals; --compare A B.")(evaluate)
app.command(help="Supervised fine-tuning on demonstrations from a trace store (warm start before RL).")(sft)
app.command(help="Browse traces, task groups and training curves in a local web app.")(view)
app.command(help="Chat with the policy through a gateway; every turn is a recorded step.")(chat)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"agentr1 {version('agentr1')}")
        raise typer.Exit()


@app.callback()
def main(
    _version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True, help="Show the version."),
) -> None:
    """agentr1: an OpenAI-compatible gateway that records exact step traces, and a trainer."""
    keep_freed_memory()  # glibc keeps freed memory for reuse in this process and its children (AGENTR1_MALLOC)


# the commands that load a model or serve one: they run on jemalloc where the system has it (agentr1.core.allocator)
MODEL_COMMANDS = frozenset({"train", "sft", "eval", "gateway", "chat"})


def run() -> None:
    """The ``agentr1`` command: a model command first re-executes itself on jemalloc where the system has it
    (freed memory reused instead of faulted in again; ``AGENTR1_MALLOC=glibc`` opts out), then the CLI."""
    if len(sys.argv) > 1 and sys.argv[1] in MODEL_COMMANDS:
        preload_jemalloc()
    app()


if __name__ == "__main__":
    run()
