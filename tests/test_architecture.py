"""The architecture, enforced: the layer contracts of pyproject.toml and the parts' public APIs.

Layers (top to bottom): cli > viewer > trainer > gateway | envs | adapters > engine > core > store | sdk.
A module imports only from its own part or from parts below it, and across parts only through the
other part's public API: the part's package (``agentr1.gateway``) or one of its public subpackages,
and only names that the target lists in ``__all__``. Both rules are shown to fail on a wrong import.
The graphs are read without grimp's cache (see ``tests/test_import_cycles.py``: its builds with and without external
packages share one record of the files' times, so one can hide the other's changed files).
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import grimp
import pytest
from importlinter.contracts.layers import LayersContract

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("sdk", "store", "core", "engine", "gateway", "viewer", "trainer", "envs", "adapters", "cli")
# subpackages that are a part's public API besides the part's own package
PUBLIC_SUBPACKAGES = {
    "agentr1.core.generation",
    "agentr1.core.rendering",
    "agentr1.gateway.backends",
    "agentr1.trainer.algorithms",
    "agentr1.trainer.sft",
}


def layers_contract() -> LayersContract:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (options,) = [c for c in config["contracts"] if c["id"] == "layers"]
    return LayersContract(name=options["name"], session_options={"root_packages": ["agentr1"]},
                          contract_options={"layers": options["layers"]})


def test_lint_imports_passes() -> None:
    """The contracts as CI's tool sees them (the `lint-imports` command over the installed package)."""
    done = subprocess.run([str(Path(sys.executable).with_name("lint-imports"))], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 kept, 0 broken" in done.stdout


def test_layer_contract_fails_on_a_wrong_way_import() -> None:
    graph = grimp.build_graph("agentr1", cache_dir=None)
    assert layers_contract().check(graph, verbose=False).kept
    # the store (bottom) reaching up into the gateway: the contract must break
    graph.add_import(importer="agentr1.store.store", imported="agentr1.gateway.app", line_number=1,
                     line_contents="from agentr1.gateway.app import create_app")
    check = layers_contract().check(graph, verbose=False)
    assert not check.kept


def forbidden_contract(contract_id: str) -> Any:
    from importlinter import configuration
    from importlinter.contracts.forbidden import ForbiddenContract

    configuration.configure()  # the forbidden contract times itself through importlinter's settings

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (options,) = [c for c in config["contracts"] if c["id"] == contract_id]
    contract_options = {"source_modules": options["source_modules"], "forbidden_modules": options["forbidden_modules"]}
    if "allow_indirect_imports" in options:
        contract_options["allow_indirect_imports"] = str(options["allow_indirect_imports"])
    return ForbiddenContract(name=options["name"], session_options={"root_packages": ["agentr1"],
                                                                   "include_external_packages": True},
                             contract_options=contract_options)


def test_sql_contract_fails_on_sqlalchemy_outside_the_store() -> None:
    graph = grimp.build_graph("agentr1", include_external_packages=True, cache_dir=None)
    assert forbidden_contract("sql-in-store").check(graph, verbose=False).kept
    graph.add_import(importer="agentr1.viewer.queries", imported="sqlalchemy", line_number=1,
                     line_contents="from sqlalchemy import select")
    assert not forbidden_contract("sql-in-store").check(graph, verbose=False).kept


def test_viewer_contract_fails_on_a_trainer_import() -> None:
    """The viewer shows the trainer's rows through the store's row layout and gets advantages handed in: an import of
    the trainer anywhere in it (a function-local one included) breaks the contract."""
    graph = grimp.build_graph("agentr1", include_external_packages=True, cache_dir=None)
    assert forbidden_contract("viewer-without-trainer").check(graph, verbose=False).kept
    graph.add_import(importer="agentr1.viewer.tokens", imported="agentr1.trainer.batch", line_number=1,
                     line_contents="from agentr1.trainer import build_rows")
    assert not forbidden_contract("viewer-without-trainer").check(graph, verbose=False).kept


def cross_part_imports(source: str, part: str) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) for every import of another agentr1 part, at any depth of the file."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules, names = [node.module], [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            modules, names = [a.name for a in node.names], []
        else:
            continue
        for module in modules:
            bits = module.split(".")
            if bits[0] == "agentr1" and len(bits) > 1 and bits[1] != part:
                found.append((node.lineno, module, names))
    return found


def public_api_violations(source: str, part: str) -> list[str]:
    problems = []
    for line, module, names in cross_part_imports(source, part):
        if module.count(".") > 1 and module not in PUBLIC_SUBPACKAGES:
            problems.append(f"line {line}: {module} is another part's internal module")
            continue
        exported = set(getattr(importlib.import_module(module), "__all__", ()))
        hidden = [n for n in names if n not in exported]
        if hidden:
            problems.append(f"line {line}: {module} does not export {hidden} in __all__")
    return problems


def test_parts_import_each_other_only_through_public_apis() -> None:
    problems = []
    for part in PARTS:
        for path in sorted((ROOT / "src" / "agentr1" / part).rglob("*.py")):
            problems += [f"{path.relative_to(ROOT)} {p}" for p in public_api_violations(path.read_text(), part)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("source", [
    "def f():\n    from agentr1.gateway.gateway import CallContext\n",
    "from agentr1.store import _step_values\n",
])
def test_public_api_rule_catches_internal_imports(source: str) -> None:
    assert public_api_violations(source, "trainer")
