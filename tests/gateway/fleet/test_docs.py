"""docs/fleet.md's examples hold: the Kubernetes layout is what the DNS discovery reads, the settings exist."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from gateway.config import Settings
from gateway.engines.discovery import DnsDiscovery
from gateway.features import settings_classes

DOC = (Path(__file__).resolve().parents[3] / "docs" / "fleet.md").read_text()


def kubernetes_objects() -> dict[tuple[str, str], dict]:
    block = re.search(r"### Kubernetes.*?```yaml\n(.*?)```", DOC, re.S).group(1)
    return {(item["kind"], item["metadata"]["name"]): item for item in yaml.safe_load_all(block)}


def container_env(deployment: dict) -> dict[str, dict]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {entry["name"]: entry for entry in container["env"]}


def test_the_gateways_dns_name_is_the_headless_service_of_the_engine_pods():
    objects = kubernetes_objects()
    engines, service = objects[("Deployment", "vllm")], objects[("Service", "vllm-engines")]
    gateway = objects[("Deployment", "stack-gateway")]
    assert service["spec"]["clusterIP"] == "None"  # headless: one address per ready pod
    assert service["spec"]["selector"].items() <= engines["spec"]["template"]["metadata"]["labels"].items()
    url = container_env(gateway)["VLLM_DNS_URL"]["value"]
    discovery = DnsDiscovery(url, api_key=None)
    assert discovery.host.split(".")[0] == "vllm-engines" and discovery.host.endswith(".svc.cluster.local")
    (port,) = service["spec"]["ports"]
    (engine,) = engines["spec"]["template"]["spec"]["containers"]
    assert discovery.port == port["port"]
    assert port["targetPort"] == engine["ports"][0]["containerPort"] == 8000
    assert "--port=8000" in engine["args"]
    assert engine["readinessProbe"]["httpGet"]["path"] == "/health"  # DNS answers only ready pods


def test_the_gateway_deployment_sets_only_settings_the_gateway_reads_and_one_key_for_both_sides():
    objects = kubernetes_objects()
    gateway_env = container_env(objects[("Deployment", "stack-gateway")])
    engine_env = container_env(objects[("Deployment", "vllm")])
    fields = {name for cls in settings_classes() for name in cls.model_fields}
    assert sorted(name for name in gateway_env if name.lower() not in fields) == []
    assert gateway_env["VLLM_API_KEY"]["valueFrom"] == engine_env["VLLM_API_KEY"]["valueFrom"]
    plain = {name: entry["value"] for name, entry in gateway_env.items() if "value" in entry}
    Settings(**{name.lower(): value for name, value in plain.items()}, api_keys=["k"])  # they validate


def test_the_settings_table_lists_the_fleets_settings_with_their_defaults():
    table = dict(re.findall(r"^\| `([A-Z0-9_]+)` \| ([^|]*) \|", DOC.split("## Settings", 1)[1], re.M))
    fleet = ["VLLM_BASE_URLS", "VLLM_DNS_URL", "VLLM_DNS_REFRESH_SECONDS", "VLLM_DNS_NETWORKS", "ENGINE_METRICS_INTERVAL",
             "ROUTING_POLICY", "ROUTING_LOAD_BOUND", "ENGINE_MAX_ATTEMPTS", "ENGINE_EJECT_SECONDS",
             "STREAM_CONTINUATION"]
    assert sorted(table) == sorted(fleet)
    for name in fleet:
        shown, field = table[name].strip().strip("`"), Settings.model_fields[name.lower()]
        default = [] if field.default_factory is not None else field.default
        if default in ("", []):
            assert shown == "empty", name
        elif isinstance(default, bool):
            assert shown == str(default).lower(), name
        elif isinstance(default, (int, float)):
            assert float(shown) == float(default), name
        else:
            assert shown == default, name

def test_the_compose_example_names_the_compose_services():
    urls = re.search(r"VLLM_BASE_URLS=(\S+) \\\n  docker compose", DOC).group(1).split(",")
    assert [urlsplit(url).hostname for url in urls] == ["vllm", "vllm-2"]
