"""Guard: no task is fire-and-forget (issue 29, finding 9).

The event loop keeps only weak references to tasks: a task whose ``create_task`` result is
dropped may be garbage-collected before it finishes (Python's documentation says to keep a
reference), and its exception is never seen. Every ``create_task``/``ensure_future`` call in the
served packages must keep its result (assigned, added to a set, returned, awaited).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "marketplace", "playground")
SPAWNERS = {"create_task", "ensure_future"}


def dropped_tasks(source: str) -> list[int]:
    """Lines where a task is created as a statement of its own, its result thrown away."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in SPAWNERS:
                lines.append(node.lineno)
    return lines


def test_the_guard_finds_a_dropped_task():
    assert dropped_tasks("import asyncio\nasyncio.get_running_loop().create_task(work())\n") == [2]
    assert dropped_tasks("task = asyncio.create_task(work())\ntasks.add(asyncio.ensure_future(x))\n") == []


def test_every_task_is_kept_until_done():
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = dropped_tasks(path.read_text())
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    assert found == {}, "keep a reference to these tasks until they are done"
