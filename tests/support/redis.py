"""A real Redis server for integration tests: ``redis-server --port N --save ''`` of the tests' own.

``redis_server`` (session): one server on a free localhost port, no persistence, stopped at the
end. ``redis_url`` (function): its URL, emptied (FLUSHALL) before the test. ``stoppable_redis``
(function): a server of the test's own, which it may stop (as when the Redis host goes down)
and start again on the same port, for outage tests.

``STACK_TEST_REDIS_SERVER`` names another redis-server program (default: the one on PATH;
``scripts/install_redis.sh`` installs Debian's).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import free_port

START_ATTEMPTS = 3
START_TIMEOUT = 15.0


class RedisServer:
    def __init__(self) -> None:
        program = os.environ.get("STACK_TEST_REDIS_SERVER") or shutil.which("redis-server")
        if program is None:
            pytest.fail("redis-server not found: run scripts/install_redis.sh or set STACK_TEST_REDIS_SERVER",
                        pytrace=False)
        self.program = program
        self.root = Path(tempfile.mkdtemp(prefix="stack-redis-"))
        self.port = 0
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> RedisServer:
        for _ in range(START_ATTEMPTS):
            self.port = self.port or free_port()
            if self._launch():
                return self
            self.port = 0  # the port was taken between picking it and binding it: another one
        pytest.fail(f"redis-server did not start: {self._log_tail()}", pytrace=False)

    def start_again(self) -> None:
        """Start the stopped server on its port again (empty: it keeps no data)."""
        assert self._launch(), f"redis-server did not start again: {self._log_tail()}"

    def _launch(self) -> bool:
        self.process = subprocess.Popen(
            [self.program, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.root), "--logfile", str(self.root / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            if self._answers():
                return True
            time.sleep(0.02)
        self.stop()
        return False

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as connection:
                connection.sendall(b"PING\r\n")
                return connection.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def command(self, *args: str) -> bytes:
        """Send one inline command and return the raw reply's first line (test plumbing)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as connection:
            connection.sendall((" ".join(args) + "\r\n").encode())
            return connection.recv(4096)

    def stop(self) -> None:
        """Kill the server at once: every connection is cut, as when its host goes down."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def _log_tail(self) -> str:
        log = self.root / "redis.log"
        return log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else "(no log)"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    try:
        yield server.start()
    finally:
        server.remove()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session server's URL, emptied for this test."""
    assert redis_server.command("FLUSHALL").startswith(b"+OK")
    return redis_server.url


@pytest.fixture
def stoppable_redis() -> Iterator[RedisServer]:
    server = RedisServer()
    try:
        yield server.start()
    finally:
        server.remove()
