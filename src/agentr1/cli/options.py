"""Command-line options derived from a settings model, so that a setting is declared once.

:func:`settings_command` gives a function ``(**values) -> None`` the Typer signature of a pydantic
model's fields: one option per field (``--field-name``, or the flag named in ``flags``), the
field's description as help and its default shown. An option the user does not give arrives as
None and is left out of :func:`given`, so the model's own default (or its ``AGENTR1_*`` environment
variable) applies, exactly as for a process that reads the settings without the CLI.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

import typer
from pydantic import BaseModel, ValidationError

__all__ = ["given", "settings_command", "settings_from"]


def _option(name: str, field: Any, flag: str | None) -> tuple[Any, Any]:
    """(annotation, typer.Option) of one model field."""
    annotation = field.annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]  # X | None: the option is optional anyway
    default = None if field.default_factory is not None else field.default
    show = False if default in (None, "", []) else str(default).lower() if isinstance(default, bool) else str(default)
    extra: dict[str, Any] = {}
    if typing.get_origin(annotation) is list:
        annotation = list[str]
    elif typing.get_origin(annotation) is dict:  # repeated NAME=VALUE flags; the command parses them
        annotation, extra["metavar"] = list[str], "NAME=VALUE"
    elif annotation is bool:
        flag = flag or f"--{name.replace('_', '-')}/--no-{name.replace('_', '-')}"
    option = typer.Option(None, flag or f"--{name.replace('_', '-')}", help=field.description, show_default=show,
                          **extra)
    return annotation | None, option


def settings_command(model: type[BaseModel], fn: Callable[..., None], *, flags: dict[str, str] | None = None,
                     extra: dict[str, tuple[Any, Any]] | None = None) -> Callable[..., None]:
    """``fn`` with one keyword option per field of ``model`` (``flags``: other flag declarations, by
    field name) and the ``extra`` options ``{name: (annotation, typer.Option(...))}`` that are not
    settings. Typer reads the signature; ``fn`` receives every option by name."""
    flags = flags or {}
    parameters = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)
                  for name, (annotation, option) in
                  [(n, _option(n, f, flags.get(n))) for n, f in model.model_fields.items()] + list((extra or {}).items())]
    fn.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in parameters}
    return fn


def given(model: type[BaseModel], values: dict[str, Any]) -> dict[str, Any]:
    """The model's fields among ``values`` that the user gave (not None, not an empty repeatable)."""
    return {k: v for k, v in values.items() if k in model.model_fields and v is not None and v != [] and v != ()}


def settings_from(model: type[BaseModel], values: dict[str, Any], flags: dict[str, str] | None = None) -> Any:
    """``model(**values)``; a value the model rejects is a usage error naming the flag (exit 2)."""
    try:
        return model(**values)
    except ValidationError as exc:
        error = exc.errors()[0]
        name = str(error["loc"][0]) if error["loc"] else ""
        flag = (flags or {}).get(name, f"--{name.replace('_', '-')}").split("/")[0]
        raise typer.BadParameter(error["msg"], param_hint=flag) from None
