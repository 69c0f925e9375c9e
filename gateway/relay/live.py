"""The runs streaming straight to a client in this process, so a stopping gateway can end each explicitly.

Runs inside a session are the session manager's to end (it knows who follows them); every
other run registers here while it streams. ``end_all`` stops them with the ``shutdown``
reason: each writes its dialect's ``gateway_shutdown`` ending before the server cuts the
connection.
"""

from __future__ import annotations

from typing import Protocol


class Stoppable(Protocol):
    def stop(self, reason: str) -> bool: ...


class LiveRuns:
    def __init__(self) -> None:
        self._runs: set[Stoppable] = set()
        self.ending = False

    def add(self, run: Stoppable) -> None:
        self._runs.add(run)

    def discard(self, run: Stoppable) -> None:
        self._runs.discard(run)

    def end_all(self, reason: str) -> None:
        """Stop every run for ``reason`` (the gateway is stopping); runs starting from now stop at once."""
        self.ending = True
        for run in list(self._runs):
            run.stop(reason)

    def __len__(self) -> int:
        return len(self._runs)
