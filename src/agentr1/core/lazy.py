"""Public names of a package imported on first use: :func:`lazy_exports` makes a module ``__getattr__``
(PEP 562), so importing a part's package (its public API) does not import everything behind it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """``__getattr__`` for ``package``: ``name`` comes from the module ``homes[name]`` (relative to
    ``package`` when it starts with a dot, else a submodule name), imported and cached on first use."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        home = homes[name]
        module = importlib.import_module(home if home.startswith(".") else f".{home}", package)
        value = getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
