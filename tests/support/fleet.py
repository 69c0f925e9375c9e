"""Two real vLLM engines for the fleet's integration tests, each started by ``./launch_vllm.sh``.

``vllm_fleet`` (module scope: one pair per test module that asks for it) starts both engines
in parallel (the embedded model, free ports, a random API key each, so the gateway's per-engine
keys are exercised), and stops them at the end. A test may kill one (SIGKILL to its whole
process group: launcher, API server and engine core, as when a node dies) and start it again on
the same port with the same key.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.engine import EngineHandle, OwnEngine

ENGINES = 2


@dataclass
class FleetHandle:
    workdir: Path
    members: list[OwnEngine] = field(default_factory=list)

    @property
    def engines(self) -> list[EngineHandle]:
        return [member.handle for member in self.members]

    @property
    def base_urls(self) -> str:
        """``VLLM_BASE_URLS`` for the gateway: each engine with its own key."""
        return ",".join(f"{engine.base_url}|{engine.api_key}" for engine in self.engines)

    def kill(self, index: int) -> None:
        """SIGKILL engine ``index`` and everything its launcher started."""
        self.members[index].kill()

    def restart(self, index: int) -> EngineHandle:
        """Start engine ``index`` again, on its port with its key; returns once it is healthy."""
        return self.members[index].restart()


@pytest.fixture(scope="module")
def vllm_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetHandle]:
    workdir = tmp_path_factory.mktemp("vllm-fleet")
    fleet = FleetHandle(workdir)
    for index in range(ENGINES):
        (workdir / f"engine-{index}").mkdir()
        fleet.members.append(OwnEngine(workdir / f"engine-{index}"))
    try:
        with ThreadPoolExecutor(ENGINES) as pool:  # in parallel: start-up is the tier's largest cost
            list(pool.map(lambda member: member.start(), fleet.members))
        yield fleet
    finally:
        for member in fleet.members:
            member.stop()
