"""Names for things, and ``module:attr`` import paths: one registry helper and one callable loader
for every part (advantage estimators, reward functions, context policies, environments, flows,
tools and scorers register here; job files name functions as ``package.module:function``)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

__all__ = ["Registry", "UnknownName", "load_callable"]

T = TypeVar("T")


class UnknownName(KeyError, ValueError):
    """A name that is neither registered nor an importable ``module:attr`` (a KeyError for lookups,
    a ValueError for configuration checks: both ``except`` clauses catch it)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def load_callable(spec: str) -> Any:
    """The attribute at ``package.module:attr`` or ``path/to/file.py:attr``. Modules of the working
    directory count, as for pytest and uvicorn. Raises :class:`UnknownName` saying what is wrong."""
    module_name, _, attr = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not module_name or not attr:
        raise UnknownName(f"{spec!r} is not a module:attr path")
    if module_name.endswith(".py"):
        path = Path(module_name)
        found = importlib.util.spec_from_file_location(path.stem, path) if path.is_file() else None
        if found is None or found.loader is None:
            raise UnknownName(f"cannot import {module_name!r} for {spec!r}: no such file")
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise UnknownName(f"cannot import {module_name!r} for {spec!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise UnknownName(f"module {module_name!r} has no {attr!r}") from None


class Registry(Generic[T]):
    """Name -> object for one kind of thing (``kind`` names it in errors). ``import_paths``: a name
    that is not registered may be a ``module:attr`` path (:func:`load_callable`)."""

    def __init__(self, kind: str, *, import_paths: bool = False) -> None:
        self.kind = kind
        self.import_paths = import_paths
        self.entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the object under ``name``; another object under a taken name is an error."""

        def decorator(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorator

    def add(self, name: str, obj: T) -> None:
        if self.entries.get(name, obj) is not obj:
            raise ValueError(f"{self.kind} {name!r} is already registered: {self.entries[name]!r}")
        self.entries[name] = obj

    def names(self) -> list[str]:
        return sorted(self.entries)

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def get(self, name: str) -> T:
        """The registered ``name`` (or, with ``import_paths``, the object at ``module:attr``)."""
        if isinstance(name, str) and name in self.entries:
            return self.entries[name]
        if self.import_paths and isinstance(name, str) and ":" in name:
            return load_callable(name)  # type: ignore[no-any-return]
        paths = " (or give an import path package.module:attr)" if self.import_paths else ""
        raise UnknownName(f"unknown {self.kind} {name!r}; registered: {', '.join(self.names())}{paths}")
