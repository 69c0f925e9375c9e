"""Which engines there are: the settings' list (with per-engine keys), or DNS re-resolved (a stub resolver)."""

from __future__ import annotations

import pytest

from gateway.config import Settings
from gateway.engines.discovery import DnsDiscovery, parse_url_list, static_members
from gateway.engines.engine import display_url
from gateway.engines.fleet import Fleet
from gateway.engines.state import EngineState


def test_a_single_vllm_base_url_is_one_engine_with_vllm_api_key():
    settings = Settings(vllm_base_url="http://127.0.0.1:8001/", vllm_api_key="shared")
    assert static_members(settings) == [("http://127.0.0.1:8001", "shared")]


def test_vllm_base_urls_replaces_it_and_each_url_may_carry_its_own_key():
    settings = Settings(vllm_base_url="http://ignored:1", vllm_api_key="shared",
                        vllm_base_urls="http://a:8000|key-a, http://b:8000 ,http://a:8000|other")
    assert static_members(settings) == [("http://a:8000", "key-a"), ("http://b:8000", "shared")]
    fleet = Fleet(static_members(settings))
    assert [engine.headers["authorization"] for engine in fleet] == ["Bearer key-a", "Bearer shared"]


def test_a_url_that_is_not_http_is_refused_by_name():
    with pytest.raises(ValueError, match="'ftp://a' is not an http"):
        parse_url_list(["ftp://a"], None)


def test_credentials_in_a_url_never_show_in_the_engines_id():
    assert display_url("http://user:secret@10.0.0.1:8000") == "http://10.0.0.1:8000"
    assert display_url("http://[::1]:8000") == "http://[::1]:8000"


class StubResolver:
    """Answers what the test says; raises OSError when told the name does not resolve."""

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class AlwaysReady:
    """An engine client whose every engine answers health and lists one model."""

    def __init__(self) -> None:
        self.looked_at: list[str] = []

    async def request_bytes(self, method, path, *args, route=None, **kwargs):
        self.looked_at.append(route.engine)
        return 200, b""

    async def get_json(self, path, *, route=None, **kwargs):
        return {"data": [{"id": "m", "max_model_len": 4096, "root": "/m"}]}


def discovered(resolver: StubResolver):
    settings = Settings(vllm_dns_url="http://vllm-engines.ns.svc.cluster.local:8000", vllm_api_key="k")
    fleet = Fleet.from_settings(settings)
    client = AlwaysReady()
    state = EngineState(settings, client, fleet=fleet, discovery=DnsDiscovery.from_settings(settings, resolver))
    return state, client


async def test_dns_discovery_makes_one_engine_per_address_and_follows_the_name():
    resolver = StubResolver(["10.0.0.2", "10.0.0.1", "10.0.0.1"], ["10.0.0.2", "10.0.0.3", "fd00::7"])
    state, client = discovered(resolver)
    assert state.engines == [] and not state.ready
    await state.refresh()  # the first look resolves the name
    assert [engine.id for engine in state.engines] == ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]
    assert state.ready and state.served_models == ["m"]
    assert all(engine.headers["authorization"] == "Bearer k" for engine in state.engines)
    kept = state.fleet.get("http://10.0.0.2:8000")
    kept.inflight = 3
    await state.discover()  # a pod left, two arrived
    assert [engine.id for engine in state.engines] == ["http://10.0.0.2:8000", "http://10.0.0.3:8000",
                                                       "http://[fd00::7]:8000"]
    assert state.fleet.get("http://10.0.0.2:8000") is kept and kept.inflight == 3  # its state stays
    assert all(engine.ready for engine in state.engines)  # the new ones were looked at at once
    assert resolver.asked == [("vllm-engines.ns.svc.cluster.local", 8000)] * 2


async def test_a_failed_resolution_keeps_the_engines_and_an_empty_answer_empties_the_fleet():
    resolver = StubResolver(["10.0.0.1"], OSError("Name or service not known"), [])
    state, _ = discovered(resolver)
    await state.refresh()
    await state.discover()
    assert [engine.id for engine in state.engines] == ["http://10.0.0.1:8000"] and state.ready
    await state.discover()
    assert state.engines == [] and not state.ready
    assert state.last_error == "no inference engine is known yet"


def networked(resolver: StubResolver, networks: str):
    settings = Settings(vllm_dns_url="http://vllm-engines:8000", vllm_api_key="k", vllm_dns_networks=networks)
    state = EngineState(settings, AlwaysReady(), fleet=Fleet.from_settings(settings),
                        discovery=DnsDiscovery.from_settings(settings, resolver))
    return state


async def test_addresses_outside_the_allowed_networks_never_become_engines(caplog):
    # The engine key goes to every engine: a name pointed elsewhere must not collect it.
    resolver = StubResolver(["10.1.2.3", "203.0.113.9", "fd00::7", "2001:db8::1", "engine-3.internal", "fd00::8%eth0"],
                            ["203.0.113.9"])
    state = networked(resolver, "10.0.0.0/8,fd00::/8")
    with caplog.at_level("WARNING", logger="gateway.engine"):
        await state.refresh()
    assert [engine.id for engine in state.engines] == ["http://10.1.2.3:8000", "http://[fd00::7]:8000",
                                                       "http://[fd00::8]:8000"]
    assert state.discovery.refused == ["2001:db8::1", "203.0.113.9", "engine-3.internal"]
    [warning] = [record for record in caplog.records if "VLLM_DNS_NETWORKS" in record.getMessage()]
    assert warning.refused == ["2001:db8::1", "203.0.113.9", "engine-3.internal"]
    await state.discover()  # now only a foreign address: the fleet empties rather than sending it the key
    assert state.engines == [] and not state.ready
    assert state.last_error == "every address vllm-engines resolves to is outside VLLM_DNS_NETWORKS"


async def test_without_networks_every_address_is_an_engine():
    state = networked(StubResolver(["10.1.2.3", "203.0.113.9"]), "")
    await state.refresh()
    assert [engine.id for engine in state.engines] == ["http://10.1.2.3:8000", "http://203.0.113.9:8000"]


def test_a_network_that_does_not_parse_is_refused_by_name():
    with pytest.raises(ValueError, match="VLLM_DNS_NETWORKS entries are networks") as refused:
        Settings(vllm_dns_networks="10.0.0.0/8,10.0.0.0/33")
    assert "10.0.0.0/33" in str(refused.value)
