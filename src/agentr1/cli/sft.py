"""`agentr1 sft CONFIG`: supervised fine-tuning on demonstrations selected from a trace store."""

from __future__ import annotations

import json
import logging

import typer


def sft(
    config: str = typer.Argument(..., help="SFT config (YAML), e.g. examples/calculator/sft.yaml."),
    overrides: list[str] = typer.Argument(None, help="key.sub=value overrides, e.g. trainer.total_epochs=2"),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
) -> None:
    """Fine-tune the policy on stored steps (loss on action tokens only); checkpoints as `agentr1 train` writes them."""
    try:
        from agentr1.trainer.sft import SFTConfig, SFTTrainer
    except ModuleNotFoundError as exc:
        typer.secho(f"error: sft needs `pip install 'agentr1[trainer]'` ({exc.name} missing)", fg="red", err=True)
        raise typer.Exit(2) from exc
    from pydantic import ValidationError

    try:
        job = SFTConfig.from_yaml(config, overrides)
    except (OSError, ValueError, ValidationError) as exc:
        typer.secho(f"error: cannot load {config}: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    trainer = SFTTrainer(job, quiet=quiet)
    try:
        trainer.setup()
    except ValueError as exc:  # an empty or unusable selection: say why, no traceback
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    try:
        final = trainer.train()
    finally:
        trainer.close()
    summary = {k: v for k, v in final.items() if k in ("sft/loss", "sft/epoch")}
    summary["checkpoint"] = str(trainer.checkpoint / "hf") if trainer.checkpoint else None
    typer.echo(json.dumps(summary))
