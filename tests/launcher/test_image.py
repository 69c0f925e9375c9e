"""The gateway image starts and serves every feature, checked without Docker.

Issue 29: the Dockerfile copied ``gateway`` and ``marketplace`` only, while ``create_app`` loads
every installed feature (``playground`` included), so the compose gateway crash-looped with
``ModuleNotFoundError``. Here the image's file set is built as the Dockerfile describes (its
``COPY`` lines, less ``.dockerignore``) into a clean directory, installed into a fresh venv with
the Dockerfile's own pip command (``constraints.txt`` included), and the gateway started from
that venv the way the image's ``CMD`` does, from its ``WORKDIR``, in front of the real engine:
``/health``, the OpenAI API and a route of each feature must answer.

The Dockerfile's pip command runs as written, but reads the wheels from the wheelhouse that
``scripts/setup_gateway_env.sh`` filled with the same pins a moment before (``PIP_NO_INDEX``,
``PIP_FIND_LINKS``): no package index is asked, and the install takes seconds (the index here
takes minutes). A wheelhouse that lacks a pin is filled from the index first. The image's
``HOST=0.0.0.0`` becomes 127.0.0.1 (tests listen on loopback only).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx
import pytest

from tests.support.image import REPO_ROOT, ImageRecipe, build_context, run_steps, wheelhouse
from tests.support.servers import free_port

KEY = "sk-image-test-0123456789"
# One route of each feature the image's entry points install, and what it must answer.
FEATURE_ROUTES = {
    "marketplace": ("/api/categories", "application/json"),
    "playground": ("/playground/", "text/html"),
}
INSTALL_TIMEOUT = 600  # seconds: a hang guard for a cold cache on a loaded machine, not a measurement
START_TIMEOUT = 120


def entry_point_features() -> set[str]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return set(project["entry-points"]["stack_gateway.features"])


def packages_installed_by_pyproject() -> set[str]:
    patterns = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    return {pattern.rstrip("*") for pattern in patterns["include"]}


def test_the_image_copies_every_package_pyproject_installs():
    copied = {source for sources, _ in ImageRecipe.read().copies for source in sources}
    missing = packages_installed_by_pyproject() - copied
    assert missing == set(), f"the Dockerfile does not COPY {sorted(missing)}, which pyproject.toml installs"
    assert "constraints.txt" in copied


def test_every_feature_has_a_route_checked_here():
    assert set(FEATURE_ROUTES) == entry_point_features()


def clean_env(recipe: ImageRecipe, venv: Path, **extra: str) -> dict[str, str]:
    """The image's ENV over a minimal environment: this machine's pip settings (its index), no
    variable of the test run (no PYTHONPATH, no venv, no gateway setting)."""
    passed = {name: value for name, value in os.environ.items()
              if name.startswith("PIP_") or name in ("HOME", "LANG", "TMPDIR", "SSL_CERT_FILE")}
    env = passed | recipe.env | {"PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin"}
    return env | extra


@pytest.fixture(scope="module")
def installed_image(tmp_path_factory) -> tuple[ImageRecipe, Path, Path]:
    """(recipe, the image's root, the venv it installed into)."""
    recipe = ImageRecipe.read()
    root = tmp_path_factory.mktemp("image")
    build_context(recipe, root)
    venv = root / "venv"  # the image's system Python, here a fresh venv of this one
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    wheels = wheelhouse()
    fill_wheelhouse(wheels, root / recipe.workdir.lstrip("/"), venv)
    offline = clean_env(recipe, venv, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels))
    skipped = run_steps(recipe, root, venv, offline, timeout=INSTALL_TIMEOUT)
    assert all(step.startswith(("useradd", "chown")) for step in skipped)
    return recipe, root, venv


# (Both tests below install the image: PyPI, or pip's cache of it; the second uses the real engine.)
def fill_wheelhouse(wheels: Path, app: Path, venv: Path) -> None:
    """Download into ``wheels`` what the image's install needs and it lacks (nothing, after the setup)."""
    requirement = [str(app), *subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "constraints.py"),
                                              "build-requires"], capture_output=True, text=True,
                                             check=True).stdout.split()]
    common = ["download", "--quiet", "--dest", str(wheels), "--find-links", str(wheels),
              "--constraint", str(REPO_ROOT / "constraints.txt"), *requirement]
    python = str(venv / "bin" / "python")
    env = os.environ | {"PIP_NO_INDEX": "1"}
    if subprocess.run([python, "-m", "pip", *common], env=env, capture_output=True, timeout=INSTALL_TIMEOUT).returncode:
        subprocess.run([python, "-m", "pip", *common], check=True, timeout=INSTALL_TIMEOUT)


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_the_installed_image_holds_no_source_tree_of_the_repository(installed_image):
    recipe, root, venv = installed_image
    probe = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import gateway, marketplace, playground; print(gateway.__file__, marketplace.__file__,"
                            " playground.__file__)"],
                           cwd="/", capture_output=True, text=True, timeout=60, env=clean_env(recipe, venv))
    assert probe.returncode == 0, probe.stderr
    assert all(path.startswith(str(venv)) for path in probe.stdout.split()), probe.stdout  # installed, not a checkout


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_the_gateway_started_as_the_image_does_serves_every_feature(installed_image, vllm_engine, tmp_path):
    recipe, root, venv = installed_image
    port = free_port()
    env = clean_env(recipe, venv, HOST="127.0.0.1", PORT=str(port), API_KEYS=KEY,
                    VLLM_BASE_URL=vllm_engine.base_url, VLLM_API_KEY=vllm_engine.api_key or "")
    log = tmp_path / "gateway.log"
    command = [str(venv / "bin" / recipe.cmd[0]), *recipe.cmd[1:]]
    with log.open("wb") as output:
        process = subprocess.Popen(command, cwd=root / recipe.workdir.lstrip("/"), env=env,
                                   stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as client:
            health = wait_for_health(client, process, log)
            models = client.get("/v1/models")
            chat = client.post("/v1/chat/completions", json={
                "model": "stack-2.9", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]})
            features = {name: client.get(path) for name, (path, _) in FEATURE_ROUTES.items()}
            docs_script = client.get("/docs/assets/swagger-ui-bundle.js")  # /docs's own files are in the image
    finally:
        process.terminate()
        process.wait(timeout=60)
    assert health.status_code == 200, health.text
    assert models.status_code == 200 and vllm_engine.model in {m["id"] for m in models.json()["data"]}
    assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"] is not None, chat.text
    for name, (_, content_type) in FEATURE_ROUTES.items():
        answer = features[name]
        assert answer.status_code == 200 and answer.headers["content-type"].startswith(content_type), \
            (name, answer.status_code, answer.text[:300])
    assert docs_script.status_code == 200 and len(docs_script.content) > 100_000
    assert (root / "app" / "data" / "stack.db").exists()  # the image's data directory holds the database
    assert "Application shutdown complete" in log.read_text()  # (uvicorn then re-raises the SIGTERM)


def wait_for_health(client: httpx.Client, process: subprocess.Popen, log: Path) -> httpx.Response:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        assert process.poll() is None, f"the image's gateway exited at start-up:\n{log.read_text()[-3000:]}"
        try:
            answer = client.get("/health")
            if answer.status_code == 200:
                return answer
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"the image's gateway not healthy in {START_TIMEOUT}s:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)
