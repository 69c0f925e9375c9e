"""compose.yaml wiring: Docker is not available here, so the file is checked as data.

Every variable set on the gateway must be one the gateway reads (a typo would be
silently ignored), every service must report health, and the gateway must start
only once the engine and the database are healthy and share the engine's secret.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from gateway.features import settings_classes

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO_ROOT / "compose.yaml").read_text())


def environment(service: dict) -> dict[str, str]:
    """A service's environment, whether written as a mapping or as a KEY=VALUE list."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def interpolated_names(value: str) -> set[str]:
    """The ${NAME...} variables a compose value takes from the operator's environment."""
    return set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", value))


def with_placeholders(value: str) -> str:
    """The value with each ${...} replaced by a plain word, so it parses like a deployed value."""
    return re.sub(r"\$\{[^}]*\}", "placeholder", value)


def engine_flag(command: list[str], flag: str) -> str:
    for arg in command:
        if arg.startswith(f"{flag}="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"vllm command has no {flag}=...: {command}")


def test_every_gateway_variable_is_a_setting(compose: dict) -> None:
    fields = {name for cls in settings_classes() for name in cls.model_fields}
    env = environment(compose["services"]["gateway"])
    assert env, "the gateway service sets no environment"
    unknown = sorted(name for name in env if name.lower() not in fields)
    assert unknown == [], f"compose sets variables the gateway does not read: {unknown}"


def test_every_service_reports_health(compose: dict) -> None:
    for name, service in compose["services"].items():
        test = service.get("healthcheck", {}).get("test")
        assert test and test != ["NONE"], f"service {name} has no healthcheck"


def test_gateway_waits_for_a_healthy_engine_and_database(compose: dict) -> None:
    depends = compose["services"]["gateway"]["depends_on"]
    for dependency in ("vllm", "postgres"):
        assert depends[dependency]["condition"] == "service_healthy", dependency


def test_gateway_reaches_the_engine_with_the_engines_secret(compose: dict) -> None:
    vllm, gateway = compose["services"]["vllm"], compose["services"]["gateway"]
    env = environment(gateway)
    base = urlsplit(with_placeholders(env["VLLM_BASE_URL"]))
    assert base.hostname == "vllm"
    assert base.port == int(engine_flag(vllm["command"], "--port"))
    assert interpolated_names(engine_flag(vllm["command"], "--api-key")) == {"VLLM_API_KEY"}
    assert interpolated_names(env["VLLM_API_KEY"]) == {"VLLM_API_KEY"}


def test_gateway_uses_the_compose_database(compose: dict) -> None:
    env = environment(compose["services"]["gateway"])
    postgres = environment(compose["services"]["postgres"])
    url = urlsplit(with_placeholders(env["DATABASE_URL"]))
    assert url.scheme == "postgresql+asyncpg"
    assert url.hostname == "postgres"
    assert url.username == postgres["POSTGRES_USER"]
    assert url.path.lstrip("/") == postgres["POSTGRES_DB"]
    assert interpolated_names(env["DATABASE_URL"]) == interpolated_names(postgres["POSTGRES_PASSWORD"])


def test_engine_reserves_a_gpu(compose: dict) -> None:
    devices = compose["services"]["vllm"]["deploy"]["resources"]["reservations"]["devices"]
    assert any("gpu" in device.get("capabilities", []) for device in devices)


def test_gateway_image_runs_the_gateway(compose: dict) -> None:
    assert compose["services"]["gateway"]["build"] in (".", {"context": "."})
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert re.search(r'^CMD \["stack-gateway"\]', dockerfile, re.M)
    assert re.search(r"^FROM python:3\.11-slim", dockerfile, re.M)


# --- the two-engine variant (profile "fleet", docs/fleet.md) --------------------------------------
def documented_fleet_urls() -> list[str]:
    """The VLLM_BASE_URLS the file's header tells operators to set for the fleet profile."""
    header = (REPO_ROOT / "compose.yaml").read_text().split("\nname:", 1)[0]
    found = re.search(r"VLLM_BASE_URLS=(\S+)", header)
    assert found, "compose.yaml's header does not show the fleet's VLLM_BASE_URLS"
    return found.group(1).split(",")


def test_the_fleet_profile_adds_a_second_identical_engine_on_its_own_gpu(compose: dict) -> None:
    first, second = compose["services"]["vllm"], compose["services"]["vllm-2"]
    assert second["profiles"] == ["fleet"] and "profiles" not in first
    assert second["command"] == first["command"] and second["image"] == first["image"]
    assert second["healthcheck"] == first["healthcheck"]
    assert interpolated_names(engine_flag(second["command"], "--api-key")) == {"VLLM_API_KEY"}
    devices = second["deploy"]["resources"]["reservations"]["devices"]
    assert [device.get("device_ids") for device in devices] == [["${VLLM_2_GPU:-1}"]]


def test_the_gateway_routes_over_both_engines_with_the_fleet_profile(compose: dict) -> None:
    gateway = compose["services"]["gateway"]
    assert interpolated_names(environment(gateway)["VLLM_BASE_URLS"]) == {"VLLM_BASE_URLS"}
    assert gateway["depends_on"]["vllm-2"] == {"condition": "service_healthy", "required": False}
    port = int(engine_flag(compose["services"]["vllm"]["command"], "--port"))
    assert [(urlsplit(url).hostname, urlsplit(url).port) for url in documented_fleet_urls()] == [
        ("vllm", port), ("vllm-2", port)]


def test_the_gateway_on_postgresql_cannot_start_without_a_key_id_secret(compose: dict) -> None:
    # Owners are stored by key id; on PostgreSQL there is no file for a secret of the gateway's
    # own, so an unset secret would change every id at each restart: compose refuses instead.
    env = environment(compose["services"]["gateway"])
    assert env["KEY_ID_SECRET"].startswith("${KEY_ID_SECRET:?")


def test_the_engines_scheduler_and_the_gateways_priorities_follow_one_variable(compose: dict) -> None:
    # vLLM 0.32 silently ignores `priority` under fcfs: the two sides must never disagree.
    vllm, gateway = compose["services"]["vllm"], compose["services"]["gateway"]
    assert interpolated_names(engine_flag(vllm["command"], "--scheduling-policy")) == {"ENGINE_SCHEDULING_POLICY"}
    assert interpolated_names(environment(gateway)["ENGINE_SCHEDULING_POLICY"]) == {"ENGINE_SCHEDULING_POLICY"}
    assert engine_flag(vllm["command"], "--scheduling-policy") == "${ENGINE_SCHEDULING_POLICY:-fcfs}"
    assert environment(gateway)["ENGINE_SCHEDULING_POLICY"] == "${ENGINE_SCHEDULING_POLICY:-fcfs}"


def test_the_gateway_gets_longer_than_its_grace_period_to_stop(compose: dict) -> None:
    # docker compose stop sends SIGTERM, then SIGKILL after stop_grace_period (10 s unless set): the
    # gateway's drain (docs/operations.md#starting-and-stopping) must end before that.
    from gateway.config import Settings

    gateway = compose["services"]["gateway"]
    grace = float(environment(gateway).get("GRACEFUL_SHUTDOWN_SECONDS")
                  or Settings.model_fields["graceful_shutdown_seconds"].default)
    stop = gateway.get("stop_grace_period", "10s")
    assert re.fullmatch(r"\d+s", stop), stop
    assert int(stop[:-1]) >= grace + 5
