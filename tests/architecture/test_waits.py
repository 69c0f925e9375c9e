"""Guard: every wait in the tests has a deadline, so a regression fails the test instead of hanging CI.

A poll (a ``while`` loop that sleeps between looks) must name its deadline, or use
``tests.support.waiting.until``, which has one. The check reads the source: a loop that
calls anything named ``sleep`` must mention a ``deadline`` in its condition or body, run
inside ``async with asyncio.timeout(...)`` (or ``timeout_at``), or say on its ``while`` line
why it ends anyway (``# bounded: ...``). The per-test timeout
(tests/conftest.py) catches what no rule can see; this rule makes the failure name the wait.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _calls_sleep(node: ast.AST) -> bool:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue  # a helper defined inside the loop waits on its own account
        if isinstance(child, ast.Call):
            called = child.func
            name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
            if name == "sleep":
                return True
        if _calls_sleep(child):
            return True
    return False


def _mentions_deadline(node: ast.While) -> bool:
    return any("deadline" in (getattr(child, "id", "") or getattr(child, "attr", "") or "")
               for child in ast.walk(node) if isinstance(child, ast.Name | ast.Attribute))


TIMEOUT_SCOPES = {"timeout", "timeout_at", "fail_after"}


def _in_a_timeout_scope(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether ``node`` runs inside ``with``/``async with`` of ``asyncio.timeout(...)`` in its function."""
    while node in parents and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        node = parents[node]
        if isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                called = item.context_expr.func if isinstance(item.context_expr, ast.Call) else None
                name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
                if name in TIMEOUT_SCOPES:
                    return True
    return False


def unbounded_polls(path: Path) -> list[str]:
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.While) and _calls_sleep(node) and not _mentions_deadline(node) \
                and not _in_a_timeout_scope(node, parents):
            if "# bounded:" not in lines[node.lineno - 1]:
                where = path.relative_to(TESTS.parent) if path.is_relative_to(TESTS.parent) else path
                found.append(f"{where}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return found


def test_every_poll_in_the_tests_has_a_deadline():
    found = [poll for path in sorted(TESTS.rglob("*.py")) for poll in unbounded_polls(path)]
    assert found == [], "polls without a deadline (use tests.support.waiting.until):\n" + "\n".join(found)


def test_the_guard_sees_a_poll_without_a_deadline(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text("import asyncio\n\nasync def f(engine):\n    while not engine.received:\n"
                      "        await asyncio.sleep(0.01)\n\n\nasync def g(engine, deadline):\n"
                      "    while not engine.received:\n        assert deadline\n        await asyncio.sleep(0.01)\n"
                      "\n\nasync def h(engine):\n    async with asyncio.timeout(5):\n"
                      "        while not engine.received:\n            await asyncio.sleep(0)\n")
    assert [line.split(": ", 1)[1] for line in unbounded_polls(sample)] == ["while not engine.received:"]


def test_every_test_has_a_timeout(request):
    from tests.conftest import UNIT_TIMEOUT

    marker = request.node.get_closest_marker("timeout")
    if request.config.getoption("timeout") is not None:  # --timeout=N given: it applies, no default is added
        assert marker is None
    else:
        assert marker.args == (UNIT_TIMEOUT,)


def test_a_hanging_async_test_fails_and_the_run_goes_on(tmp_path):
    (tmp_path / "test_hang.py").write_text(
        "import asyncio\n\nimport pytest\n\n\n@pytest.mark.timeout(1)\nasync def test_hangs():\n"
        "    await asyncio.Event().wait()\n\n\ndef test_after():\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function",
                           str(tmp_path / "test_hang.py")], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout
    assert "Timeout (>1.0s) from pytest-timeout" in done.stdout and "1 failed, 1 passed" in done.stdout, done.stdout
