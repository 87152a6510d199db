"""A function-local import that crosses parts says why (issue 38): it sits in a ``try`` that catches ImportError
(an optional extra, the code says so itself) or carries a ``#`` comment on its line or heading its block of imports (a heavy
import kept off ``--help``, an import cycle the layers forbid at module level, ...)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "agentr1"
OPTIONAL = {"ImportError", "ModuleNotFoundError"}


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(k, ast.Name) and k.id in OPTIONAL for k in kinds)


def unexplained_local_imports(source: str, part: str) -> list[int]:
    """Lines of function-local imports of another agentr1 part with neither reason."""
    lines = source.splitlines()
    guarded: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            guarded |= {n.lineno for stmt in node.body for n in ast.walk(stmt) if hasattr(n, "lineno")}
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            crossing = any(m.split(".")[0] == "agentr1" and m.split(".")[1:2] != [part] for m in modules)
            above = node.lineno - 2  # the comment may head a block of imports
            while above > 0 and lines[above].strip().startswith(("from ", "import ")):
                above -= 1
            said = "#" in lines[node.lineno - 1] or lines[above].strip().startswith("#")
            if crossing and not said and node.lineno not in guarded:
                found.append(node.lineno)
    return sorted(set(found))


def test_every_function_local_import_across_parts_says_why() -> None:
    problems = []
    for path in sorted(SRC.rglob("*.py")):
        part = path.relative_to(SRC).parts[0]
        problems += [f"{path.relative_to(SRC.parents[1])}:{line}" for line in
                     unexplained_local_imports(path.read_text(), part)]
    assert not problems, "function-local imports across parts without a reason:\n" + "\n".join(problems)


@pytest.mark.parametrize(("source", "found"), [
    ("def f():\n    from agentr1.gateway import Gateway\n", [2]),
    ("def f():\n    # a cycle: the gateway imports this module\n    from agentr1.gateway import Gateway\n", []),
    ("def f():\n    from agentr1.gateway import Gateway  # lazy: torch\n", []),
    ("def f():\n    # lazy: torch\n    from agentr1.core import x\n    from agentr1.gateway import Gateway\n", []),
    ("def f():\n    # lazy: torch\n    x = 1\n    from agentr1.gateway import Gateway\n", [4]),
    ("def f():\n    try:\n        from agentr1.gateway import Gateway\n    except ImportError:\n        pass\n", []),
    ("def f():\n    try:\n        from agentr1.gateway import Gateway\n    except ValueError:\n        pass\n", [3]),
    ("def f():\n    from agentr1.trainer import x\n", []),  # its own part
])
def test_the_rule_sees_a_local_import_without_a_reason(source: str, found: list[int]) -> None:
    assert unexplained_local_imports(source, "trainer") == found
