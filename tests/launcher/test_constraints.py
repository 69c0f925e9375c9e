"""constraints.txt pins every package the gateway installs, and a stale file stops the setup loudly.

Engineers add dependencies to pyproject.toml in parallel; a dependency without a pin would
install whatever is newest on the day. ``scripts/constraints.py check`` (run by
``scripts/setup_gateway_env.sh`` before it installs) and these tests name such a dependency
and the one command that fixes it (``make constraints``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO_ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("constraints", REPO_ROOT / "scripts" / "constraints.py")
constraints = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(constraints)

EXTRAS = ("test", "bench")


def test_every_dependency_of_pyproject_is_pinned_in_range():
    assert constraints.problems() == [], "constraints.txt is stale: run `make constraints` and commit it"


def installed_closure() -> dict[str, str]:
    """``{name: version}`` of every distribution the installed stack-gateway[test,bench] needs, transitively."""
    found: dict[str, str] = {}
    pending = [(constraints.PROJECT, set(EXTRAS))]
    while pending:
        name, extras = pending.pop()
        distribution = importlib.metadata.distribution(name)
        for text in distribution.requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not any(
                    requirement.marker.evaluate({"extra": extra}) for extra in extras | {""}):
                continue
            key = canonicalize_name(requirement.name)
            if key not in found:
                found[key] = importlib.metadata.version(requirement.name)
                pending.append((requirement.name, set(requirement.extras)))
    return found


def test_the_environment_holds_exactly_the_pinned_versions():
    pins = constraints.pinned()
    closure = installed_closure()
    unpinned = sorted(name for name in closure if name not in pins)
    assert unpinned == [], f"installed but not pinned (run `make constraints`): {unpinned}"
    differ = {name: (version, pins[name]) for name, version in closure.items() if version != pins[name]}
    assert differ == {}, f"installed version != pin (run scripts/setup_gateway_env.sh): {differ}"


def test_a_dependency_added_without_a_pin_is_named(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text((REPO_ROOT / "pyproject.toml").read_text().replace(
        'dependencies = [\n', 'dependencies = [\n    "redis>=5",\n    "fastapi>=999",\n', 1))
    assert constraints.problems(pyproject) == [
        "redis (dependencies) has no pin",
        f"fastapi=={constraints.pinned()['fastapi']} is outside fastapi>=999 (dependencies)",
    ]


def test_the_setup_stops_on_a_stale_file_with_the_command_that_fixes_it(tmp_path):
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    for name in ("scripts/setup_gateway_env.sh", "scripts/constraints.py", "constraints.txt", "Dockerfile"):
        shutil.copy2(REPO_ROOT / name, root / name)
    (root / "pyproject.toml").write_text((REPO_ROOT / "pyproject.toml").read_text().replace(
        'dependencies = [\n', 'dependencies = [\n    "redis>=5",\n', 1))
    done = subprocess.run(["bash", str(root / "scripts" / "setup_gateway_env.sh")], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL,
                          env=os.environ | {"GATEWAY_VENV": str(tmp_path / "venv"), "GATEWAY_PYTHON": sys.executable})
    assert done.returncode == 1
    assert "redis (dependencies) has no pin" in done.stderr
    assert "Run `make constraints` and commit constraints.txt" in done.stderr
    assert "installing" not in done.stderr  # stopped before pip ran
