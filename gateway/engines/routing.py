"""What a request tells the engine layer about where it should go: its routing hints.

With one engine they change nothing. With a fleet (several engines behind the gateway) the
router reads them: the model (only engines serving it qualify), an affinity key (a
session, a conversation, the OpenAI ``user``: the same key goes to the same engine while
it is healthy) and the prompt's prefix (requests sharing it go where it is cached).
Protocols fill them from what they parsed anyway; nothing here reads a body again.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RouteHints:
    model: str | None = None          # the engine-side model name the request asks for
    affinity_key: str | None = None   # keeps related requests on one engine
    prefix: bytes | None = None       # the leading part of the prompt, for prefix-cache affinity


NO_HINTS = RouteHints()
