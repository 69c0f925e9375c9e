"""An engine of its own for flow control's integration tests: vLLM's priority scheduler, two sequences at a time.

Started once for the package (``launch_vllm.sh`` with ``ENGINE_SCHEDULING_POLICY=priority`` and
``--max-num-seqs 2``), so two long generations saturate it at once and whatever comes next
waits, inside it or in the gateway.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.engine import EngineHandle, _LaunchedEngine

RUNNING_SLOTS = 2


@pytest.fixture(scope="package")
def priority_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineHandle]:
    launcher = _LaunchedEngine(tmp_path_factory.mktemp("priority-engine"),
                               extra_args=("--max-num-seqs", str(RUNNING_SLOTS)),
                               env={"ENGINE_SCHEDULING_POLICY": "priority"})
    with launcher as engine:
        yield engine
