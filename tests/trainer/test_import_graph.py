"""The trainer's files import each other one way: no import cycle among the modules of ``agentr1.trainer``.

The graph is grimp's (as ``tests/test_architecture.py`` builds it), with imports made only for type checking and
function-local ones included: a cycle hidden behind ``TYPE_CHECKING`` or a late import is still a cycle a reader
has to follow round. The check is shown to fail on a cycle added to the real graph.
"""

from __future__ import annotations

import grimp

PACKAGE = "agentr1.trainer"


def import_cycles(graph: grimp.ImportGraph, package: str = PACKAGE) -> list[list[str]]:
    """The strongly connected groups of more than one module among ``package``'s modules (Tarjan's algorithm), each
    sorted: every module of a group reaches every other one through imports inside the package."""
    modules = sorted(m for m in graph.modules if m == package or m.startswith(f"{package}."))
    inside = set(modules)
    edges = {m: sorted(i for i in graph.find_modules_directly_imported_by(m) if i in inside and i != m)
             for m in modules}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        on_stack.add(module)
        for imported in edges[module]:
            if imported not in order:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], order[imported])
        if low[module] == order[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in modules:
        if module not in order:
            visit(module)
    return sorted(cycles)


def test_the_trainer_has_no_import_cycle() -> None:
    graph = grimp.build_graph("agentr1")
    assert len([m for m in graph.modules if m.startswith(f"{PACKAGE}.")]) > 40  # the whole part was read
    assert import_cycles(graph) == []


def test_the_check_finds_a_cycle_added_to_the_graph() -> None:
    graph = grimp.build_graph("agentr1")
    # the row type reaching back into the batch builder that imports it: a two-module cycle
    graph.add_import(importer="agentr1.trainer.rows", imported="agentr1.trainer.batch", line_number=1,
                     line_contents="from agentr1.trainer.batch import BatchConfig")
    assert import_cycles(graph) == [["agentr1.trainer.batch", "agentr1.trainer.rows"]]
    # a longer one, through the loop: every module on it is reported
    graph = grimp.build_graph("agentr1")
    graph.add_import(importer="agentr1.trainer.groups", imported="agentr1.trainer.loop", line_number=1,
                     line_contents="from agentr1.trainer.loop import Trainer")
    (cycle,) = import_cycles(graph)
    assert {"agentr1.trainer.groups", "agentr1.trainer.loop"} <= set(cycle)
