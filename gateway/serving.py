"""The served process: a heap the cycle collector no longer walks, and the drain that starts when told to stop.

Once the gateway has started, the ~160,000 objects it holds for good (modules, classes,
routes, settings, pools) would be walked by every full collection of Python's cycle
collector: measured under 32 streams, five full collections in 20 s took 100 ms each,
stalling every stream and every new request's first token while they ran.
``freeze_startup_heap`` moves them out of the collector's generations (``gc.freeze``), so a
collection only walks what was allocated since; objects still die by reference count as
ever.

uvicorn stops in this order: stop accepting, wait up to ``timeout_graceful_shutdown`` for
open requests, cancel what is left, and only then run the app's lifespan shutdown. A
gateway that waited for its lifespan to end streams would end them after uvicorn had
already cut the connections. So the drain starts at the signal (SIGTERM, or the first
Ctrl-C): SIGINT/SIGTERM handlers are chained in front of uvicorn's (in the main thread,
where uvicorn installs its own; every worker process has one), and the app's drain hooks
run at once, with the grace period they have left.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import threading
from collections.abc import Callable, Iterator

DRAIN_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def freeze_startup_heap() -> None:
    """Collect what start-up left behind, then keep every object alive now out of later collections."""
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def drain_on_signals(begin_drain: Callable[[], None]) -> Iterator[None]:
    """While inside, SIGINT/SIGTERM first call ``begin_drain`` (on the loop), then their old handler."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals only reach the main thread; whoever runs us elsewhere stops us itself
        return
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in DRAIN_SIGNALS}

    def handler(signum, frame) -> None:
        loop.call_soon_threadsafe(begin_drain)
        before = previous[signum]
        if callable(before):
            before(signum, frame)
        else:  # nobody handled it before us: do what the default would, once we are out of the way
            signal.signal(signum, before)
            signal.raise_signal(signum)

    for sig in DRAIN_SIGNALS:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, before in previous.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, before)
