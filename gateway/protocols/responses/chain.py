"""A ``previous_response_id`` conversation, stored once: each response keeps its own input items.

Before, every stored response kept the whole conversation again (its history plus its input),
so a chain of n turns stored O(n^2) items. Now a response keeps its own input items and the id
of the response it continues (``previous_id``); the conversation is rebuilt by walking back to
the first response: each one's input, then its output, in order. A response stored by an
earlier release has no ``previous_id`` and its whole conversation, so a walk ends there too.

A chain lives as long as its newest response: storing one keeps every response it continues at
least as long (``keep_until``). A response deleted from the middle leaves its continuations
unable to go on: that is a 404 naming ``previous_response_id``. The walk is bounded
(``MAX_TURNS``); the rebuilt body is held to ``MAX_BODY_BYTES`` (``quota.check_rebuilt``).
"""

from __future__ import annotations

import orjson

from gateway.http.errors import GatewayError
from gateway.protocols.responses.prepare import output_items
from gateway.protocols.responses.records.base import ResponseRecords, StoredResponse

MAX_TURNS = 10_000


async def conversation(records: ResponseRecords, last: StoredResponse) -> tuple[list, list[str]]:
    """The items of ``last``'s conversation, ``last``'s output included; and the ids walked."""
    chain = [last]
    seen = {last.response_id}
    while chain[-1].previous_id is not None:
        previous_id = chain[-1].previous_id
        if previous_id in seen or len(chain) >= MAX_TURNS:
            raise GatewayError(400, f"the conversation of response '{last.response_id}' is longer than "
                                    f"{MAX_TURNS} turns: start a new one", param="previous_response_id")
        earlier = await records.load_response(last.owner, previous_id)
        if earlier is None:
            raise GatewayError(404, f"response '{previous_id}', an earlier turn of the conversation of "
                                    f"'{last.response_id}', is no longer stored", param="previous_response_id",
                               code="response_not_found")
        chain.append(earlier)
        seen.add(previous_id)
    items: list = []
    for record in reversed(chain):
        items += orjson.loads(record.history)
        items += output_items(record.body)
    return items, [record.response_id for record in chain]
