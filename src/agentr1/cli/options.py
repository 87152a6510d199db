"""Command-line options derived from a settings model, so that a setting is declared once.

:func:`settings_command` gives a function ``(**values) -> None`` the Typer signature of a pydantic
model's fields: one option per field (``--field-name``, or the flag named in ``flags``), the
field's description as help and its default shown. A field that is itself a model (a group of settings,
e.g. ``GatewaySettings.engine``) gives one option per field of that model, named group + field
(``engine.dtype``: ``--engine-dtype``; ``flags`` and :func:`given` name it by its dotted path). An option the
user does not give arrives as None and is left out of :func:`given`, so the model's own default (or its
``AGENTR1_*`` environment variable) applies, exactly as for a process that reads the settings without the CLI.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any

import typer
from pydantic import BaseModel, ValidationError

__all__ = ["given", "option_fields", "settings_command", "settings_from"]


def _group(annotation: Any) -> type[BaseModel] | None:
    """The model of a field that groups settings, else None."""
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def option_fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, field) of every option of ``model``: its fields, a group's fields in its place."""
    for name, field in model.model_fields.items():
        group = _group(field.annotation)
        if group is None:
            yield prefix + name, field
        else:
            yield from option_fields(group, f"{prefix}{name}.")


def _parameter(path: str) -> str:
    """The Python name of the option of ``path`` (``engine.dtype``: ``engine__dtype``)."""
    return path.replace(".", "__")


def _flag(path: str, flags: dict[str, str] | None) -> str:
    return (flags or {}).get(path, "--" + path.replace(".", "-").replace("_", "-"))


def _option(path: str, field: Any, flag: str | None) -> tuple[Any, Any]:
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
    elif annotation is bool and flag is None:
        flag = f"{_flag(path, None)}/--no-{_flag(path, None)[2:]}"
    option = typer.Option(None, flag or _flag(path, None), help=field.description, show_default=show, **extra)
    return annotation | None, option


def settings_command(model: type[BaseModel], fn: Callable[..., None], *, flags: dict[str, str] | None = None,
                     extra: dict[str, tuple[Any, Any]] | None = None) -> Callable[..., None]:
    """``fn`` with one keyword option per setting of ``model`` (:func:`option_fields`; ``flags``: other flag
    declarations, by dotted path) and the ``extra`` options ``{name: (annotation, typer.Option(...))}`` that are not
    settings. Typer reads the signature; ``fn`` receives every option by name (a group's as ``group__field``)."""
    flags = flags or {}
    options = [(_parameter(path), _option(path, field, flags.get(path))) for path, field in option_fields(model)]
    parameters = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)
                  for name, (annotation, option) in options + list((extra or {}).items())]
    fn.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in parameters}
    return fn


def given(model: type[BaseModel], values: dict[str, Any]) -> dict[str, Any]:
    """The model's settings among ``values`` that the user gave (not None, not an empty repeatable), a group's
    nested under its name (``{"engine": {"dtype": "bfloat16"}}``)."""
    chosen: dict[str, Any] = {}
    for path, _ in option_fields(model):
        value = values.get(_parameter(path))
        if value is None or value == [] or value == ():
            continue
        *groups, name = path.split(".")
        node = chosen
        for group in groups:
            node = node.setdefault(group, {})
        node[name] = value
    return chosen


def settings_from(model: type[BaseModel], values: dict[str, Any], flags: dict[str, str] | None = None) -> Any:
    """``model(**values)``; a value the model rejects is a usage error naming the flag (exit 2)."""
    try:
        return model(**values)
    except ValidationError as exc:
        error = exc.errors()[0]
        path = ".".join(str(part) for part in error["loc"])
        flag = _flag(path, flags).split("/")[0]
        raise typer.BadParameter(error["msg"], param_hint=flag) from None
