"""The engine is a part below the gateway: none of its modules imports the gateway (directly or through another
module), and importing its package does not import torch."""

from __future__ import annotations

import subprocess
import sys

import grimp


def test_no_engine_module_reaches_the_gateway():
    graph = grimp.build_graph("agentr1")
    engine = graph.find_descendants("agentr1.engine") | {"agentr1.engine"}
    assert len(engine) > 10
    assert not graph.chain_exists(importer="agentr1.engine", imported="agentr1.gateway", as_packages=True)
    for module in sorted(engine):
        assert not {m for m in graph.find_modules_directly_imported_by(module) if m.startswith("agentr1.gateway")}


def test_importing_every_engine_module_loads_no_gateway_module():
    code = """
import importlib, pkgutil, sys
import agentr1.engine as engine
assert "torch" not in sys.modules, "the package alone loads torch"
for name in engine.__all__:
    getattr(engine, name)
for info in pkgutil.iter_modules(engine.__path__):
    importlib.import_module(f"agentr1.engine.{info.name}")
print(sorted(m for m in sys.modules if m.startswith("agentr1.gateway")))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
