"""`make lint` and the test command's lint stage are one definition, and it covers the whole tree.

Before, the test command skipped shellcheck and the Makefile skipped ``playground``: each list
had drifted on its own. Both now run ``scripts/lint.sh``; these tests keep its lists complete.
"""

from __future__ import annotations

import glob
import re
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
LINT = (REPO_ROOT / "scripts" / "lint.sh").read_text()


def bash_array(name: str) -> list[str]:
    found = re.search(rf"^{name}=\(([^)]*)\)", LINT, re.MULTILINE)
    assert found is not None, f"scripts/lint.sh has no {name}=(...)"
    return found.group(1).split()


def tracked(*patterns: str) -> list[str]:
    return subprocess.run(["git", "ls-files", *patterns], cwd=REPO_ROOT, capture_output=True, text=True,
                          check=True, timeout=60).stdout.split()


def test_make_lint_and_the_test_command_run_the_same_script():
    makefile = (REPO_ROOT / "Makefile").read_text()
    recipe = re.search(r"^lint:\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe is not None and recipe.group(1).split() == ["scripts/lint.sh"]
    test_command = (REPO_ROOT / "scripts" / "test.sh").read_text()
    assert re.search(r'^stage "lint[^"]*" scripts/lint\.sh ', test_command, re.MULTILINE)


def test_ruff_checks_every_python_tree():
    trees = {path.split("/", 1)[0] for path in tracked("*.py") if "/" in path}
    assert trees - set(bash_array("PYTHON_TREES")) == set()


def test_shellcheck_checks_every_shell_script():
    scripts = {path for path in tracked() if path.endswith(".sh")
               or (REPO_ROOT / path).is_file() and (REPO_ROOT / path).read_bytes()[:32].startswith(b"#!/usr/bin/env bash")}
    covered = {path for pattern in bash_array("SHELL_SCRIPTS") for path in glob.glob(pattern, root_dir=REPO_ROOT)}
    assert scripts - covered == set()
