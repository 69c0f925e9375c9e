"""The shape of the code, checked: no import circle anywhere in gateway/ or marketplace/.

The layer contracts themselves live in pyproject.toml and run as ``lint-imports`` in the
test command; a circle between two modules of one layer is what they cannot see.
"""

from __future__ import annotations

import grimp


def cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Every import circle among ``modules`` (each as the modules in it), by depth-first search."""
    found, state, stack = [], {}, []

    def visit(module: str) -> None:
        state[module] = "open"
        stack.append(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module) & modules):
            if state.get(imported) == "open":
                found.append(stack[stack.index(imported):] + [imported])
            elif imported not in state:
                visit(imported)
        stack.pop()
        state[module] = "done"

    for module in sorted(modules):
        if module not in state:
            visit(module)
    return found


def test_no_import_circle_in_gateway_or_marketplace():
    graph = grimp.build_graph("gateway", "marketplace")  # TYPE_CHECKING imports count too
    modules = {m for m in graph.modules if m.split(".")[0] in ("gateway", "marketplace")}
    assert len(modules) > 60  # the whole code base was read
    assert cycles(graph, modules) == []


def test_the_cycle_finder_finds_a_planted_circle():
    graph = grimp.ImportGraph()
    for module in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(module)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.z")
    graph.add_import(importer="a.z", imported="a.x")
    assert cycles(graph, {"a.x", "a.y", "a.z"}) == [["a.x", "a.y", "a.z", "a.x"]]
