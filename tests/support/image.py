"""The gateway image without Docker: its file set and its install, read from the Dockerfile.

Docker is not available on the project's machines, so ``tests/launcher/test_image.py`` does
what the Dockerfile says with plain tools: ``ImageRecipe.read()`` parses the instructions it
uses (an instruction or a ``RUN`` step it does not know fails the test, so the test cannot
silently drift from the file), ``build_context`` copies what the ``COPY`` lines copy, less what
``.dockerignore`` excludes, and ``run_steps`` runs the ``RUN`` steps with a fresh venv's pip.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

REPO_ROOT = Path(__file__).resolve().parents[2]
KNOWN = {"FROM", "ENV", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "CMD"}
# RUN steps that only matter inside a container (a system user and its ownership of /app/data).
CONTAINER_ONLY = ("useradd ", "chown ")


@dataclass
class ImageRecipe:
    base: str = ""
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    copies: list[tuple[list[str], str]] = field(default_factory=list)  # (sources, destination as written)
    steps: list[str] = field(default_factory=list)                       # RUN commands, split at &&
    cmd: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, dockerfile: Path = REPO_ROOT / "Dockerfile") -> "ImageRecipe":
        recipe = cls()
        text = re.sub(r"\\\n", " ", "\n".join(line for line in dockerfile.read_text().splitlines()
                                                if not line.lstrip().startswith("#")))
        for line in filter(None, (line.strip() for line in text.splitlines())):
            instruction, _, rest = line.partition(" ")
            instruction = instruction.upper()
            assert instruction in KNOWN, f"Dockerfile: teach tests/support/image.py the {instruction} instruction"
            if instruction == "FROM":
                recipe.base = rest.strip()
            elif instruction == "ENV":
                recipe.env.update(item.split("=", 1) for item in shlex.split(rest))
            elif instruction == "WORKDIR":
                recipe.workdir = str(PurePosixPath(recipe.workdir) / rest.strip())
            elif instruction == "COPY":
                words = [word for word in shlex.split(rest) if not word.startswith("--")]
                into = words[-1] if words[-1].startswith("/") else f"{recipe.workdir.rstrip('/')}/{words[-1]}"
                recipe.copies.append((words[:-1], into))
            elif instruction == "RUN":
                recipe.steps += [step.strip() for step in rest.split("&&")]
            elif instruction == "CMD":
                recipe.cmd = json.loads(rest)
                assert isinstance(recipe.cmd, list), f"Dockerfile: CMD in exec form expected, got {rest}"
        return recipe


def ignored_patterns(dockerignore: Path = REPO_ROOT / ".dockerignore") -> list[re.Pattern]:
    """.dockerignore's patterns as regexes over context-relative paths (Docker's rules: a pattern is
    anchored at the context's root, ``*`` stays within one directory, ``**`` crosses any)."""
    patterns = []
    for line in dockerignore.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assert not line.startswith("!"), ".dockerignore: exceptions (!) are not supported by tests/support/image.py"
        regex = ""
        for token in re.split(r"(\*\*/|\*\*|\*|\?)", line.strip("/")):
            regex += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token, re.escape(token))
        patterns.append(re.compile(regex))
    return patterns


def _ignored(relative: PurePosixPath, patterns: list[re.Pattern]) -> bool:
    candidates = [relative, *relative.parents][:-1]  # the path and each directory above it, not "."
    return any(pattern.fullmatch(str(path)) for path in candidates for pattern in patterns)


def build_context(recipe: ImageRecipe, root: Path) -> Path:
    """Copy what the COPY lines copy into ``root`` (the image's ``/``); the image's WORKDIR there."""
    patterns = ignored_patterns()
    for sources, destination in recipe.copies:
        target = root / destination.lstrip("/")
        for source in sources:
            origin = REPO_ROOT / source
            assert origin.exists(), f"Dockerfile copies {source}, which does not exist"
            if origin.is_dir():
                files = [path for path in origin.rglob("*") if path.is_file()]
                for path in files:
                    relative = PurePosixPath(path.relative_to(REPO_ROOT).as_posix())
                    if not _ignored(relative, patterns):
                        copy_to = target / path.relative_to(origin)
                        copy_to.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(path, copy_to)
            else:  # a file: into the destination when it names a directory ("./"), else as it
                into_directory = destination.endswith("/") or len(sources) > 1
                assert into_directory or len(sources) == 1, f"COPY of several files needs a directory: {destination}"
                copy_to = target / origin.name if into_directory else target
                copy_to.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, copy_to)
    workdir = root / recipe.workdir.lstrip("/")
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


def run_steps(recipe: ImageRecipe, root: Path, venv: Path, env: dict[str, str], *, timeout: float) -> list[str]:
    """Run the RUN steps in the image's WORKDIR: ``pip`` is the venv's, paths are under ``root``.

    Returns the steps skipped as container-only (a system user, file ownership). ``env`` may
    point pip at a wheelhouse (``PIP_NO_INDEX``, ``PIP_FIND_LINKS``): the command stays the
    Dockerfile's.
    """
    workdir = root / recipe.workdir.lstrip("/")
    skipped = []
    for step in recipe.steps:
        words = shlex.split(step)
        if step.startswith(CONTAINER_ONLY):
            skipped.append(step)
        elif words[:2] == ["pip", "install"]:
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", *words[1:]], cwd=workdir, env=env,
                           check=True, timeout=timeout, stdin=subprocess.DEVNULL)
        elif words[:2] == ["mkdir", "-p"]:
            for path in words[2:]:
                (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
        else:
            raise AssertionError(f"Dockerfile: teach tests/support/image.py the RUN step {step!r}")
    return skipped


def wheelhouse() -> Path:
    """Where scripts/setup_gateway_env.sh keeps the pinned wheels (``GATEWAY_WHEELS``)."""
    import os

    return Path(os.environ.get("GATEWAY_WHEELS") or REPO_ROOT / ".cache" / "wheels")
