"""The disconnect watcher drives ``receive()`` itself: what a task did, it still does, without the task."""

from __future__ import annotations

import asyncio

from gateway.http.disconnect import DisconnectWatcher

DISCONNECT = {"type": "http.disconnect"}


class Server:
    """A server's ``receive()`` after the body was read: it returns when the client leaves."""

    def __init__(self) -> None:
        self.left = asyncio.Event()
        self.waiting = 0     # receive() calls waiting now
        self.finished = 0    # receive() calls that ended (returned, or were closed while waiting)
        self.extra: list[dict] = []  # messages returned before the disconnect

    async def receive(self) -> dict:
        self.waiting += 1
        try:
            if self.extra:
                await asyncio.sleep(0)  # a bare yield on the way
                return self.extra.pop(0)
            await self.left.wait()
            return DISCONNECT
        finally:
            self.waiting -= 1
            self.finished += 1


async def test_a_disconnect_calls_back_and_no_task_is_created():
    server = Server()
    called = []
    tasks = len(asyncio.all_tasks())
    watcher = DisconnectWatcher(server.receive, lambda: called.append(True)).start()
    assert len(asyncio.all_tasks()) == tasks
    await asyncio.sleep(0)
    assert server.waiting == 1 and not called
    server.left.set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert called == [True] and watcher.disconnected
    assert server.waiting == 0


async def test_stop_closes_the_waiting_receive_and_nobody_is_called():
    server = Server()
    called = []
    watcher = DisconnectWatcher(server.receive, lambda: called.append(True)).start()
    await asyncio.sleep(0)
    assert server.waiting == 1
    watcher.stop()
    assert server.waiting == 0 and server.finished == 1  # its finally ran at once (a cancel: on the next turn)
    server.left.set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not called and not watcher.disconnected


async def test_stopped_before_it_started_receive_never_runs():
    server = Server()
    watcher = DisconnectWatcher(server.receive, lambda: None).start()
    watcher.stop()
    await asyncio.sleep(0)
    assert server.finished == 0 and server.waiting == 0


async def test_other_messages_are_read_past_until_the_disconnect():
    server = Server()
    server.extra = [{"type": "http.request", "body": b"", "more_body": False}]
    called = []
    watcher = DisconnectWatcher(server.receive, lambda: called.append(True)).start()
    for _ in range(3):
        await asyncio.sleep(0)
    assert server.finished == 1 and server.waiting == 1 and not called
    server.left.set()
    for _ in range(2):
        await asyncio.sleep(0)
    assert called == [True] and watcher.disconnected


async def test_a_disconnect_cancels_the_waiting_request_task():
    server = Server()

    async def request() -> str:
        task = asyncio.current_task()
        watcher = DisconnectWatcher(server.receive, task.cancel).start()
        try:
            await asyncio.sleep(30)  # the engine request
            return "answered"
        except asyncio.CancelledError:
            return "client left" if watcher.disconnected else "cancelled"
        finally:
            watcher.stop()

    running = asyncio.ensure_future(request())
    await asyncio.sleep(0)
    server.left.set()
    assert await asyncio.wait_for(running, 5) == "client left"


async def test_ticks_keep_coming_while_watching():
    server = Server()
    ticked = asyncio.Event()

    async def tick() -> None:
        ticked.set()

    watcher = DisconnectWatcher(server.receive, lambda: None, tick_seconds=0.01, on_tick=tick).start()
    try:
        await asyncio.wait_for(ticked.wait(), 5)
    finally:
        watcher.stop()
