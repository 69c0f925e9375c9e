"""Which end user a request is made for, as the limiter counts it: an opaque label, never the id itself.

An app key's ``end_user`` limits (``tenancy.model.Limits``) apply to each of its end users.
Who the end user is, first found wins:

1. a feature's end-user token (the marketplace's ``mpu_...``): the user it was issued for
   (the principal's ``subject``); the request body cannot say otherwise;
2. the body's own field: OpenAI's ``user`` (chat, completions, Responses, embeddings) or
   Anthropic's ``metadata.user_id`` (``/v1/messages``). The marketplace sends its user's id in
   ``user`` when an app key chats for one of its users, so both ways count as the same user.

The id is the caller's, opaque and possibly personal (an e-mail address): the limiter counts
it under a label made the way key ids are made (``http.key_ids``: HMAC-SHA256 with the
key-id secret, 16 hex digits), so Redis key names, logs and metrics never hold the id
itself, and replicas sharing ``KEY_ID_SECRET`` agree on the label. The usage ledger records the
same label (``relay.metering``), for every key that names an end user, whatever its limits, so
``GET /admin/usage?group_by=user`` shows labels and ``?user=<id>`` finds one user's rows. An id longer than
``MAX_END_USER_CHARS`` is refused (400 naming the field); anything but a non-empty string is
no end user (the engine validates the field's type itself).
"""

from __future__ import annotations

from typing import Any

from gateway.http.auth import hash_key
from gateway.http.errors import GatewayError
from gateway.http.key_ids import key_id, process_secret

ANTHROPIC_PATH = "/v1/messages"
MAX_END_USER_CHARS = 256  # Anthropic's bound of metadata.user_id
_DOMAIN = "end-user:"  # keeps a label apart from the key id of a key that happens to be the same string


class EndUsers:
    """The end user of a request, as the label its limits are counted under."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret if secret is not None else process_secret()

    def label(self, principal: Any, payload: dict | None, path: str, *, bounded: bool = True) -> str | None:
        """``principal``'s end user in its call of ``path`` (``payload``: the body, parsed), labelled; None: none.

        ``bounded`` False: an id over ``MAX_END_USER_CHARS`` is labelled too instead of refused (the
        ledger's use: a request without end-user limits is never refused for its ``user``).
        """
        found = end_user_of(principal, payload, path, bounded=bounded)
        if found is None:
            return None
        return self.label_of(found)

    def label_of(self, end_user: str) -> str:
        """The label of the end user ``end_user`` (what the limiter and the usage ledger keep)."""
        return key_id(hash_key(_DOMAIN + end_user), self._secret)


def end_user_of(principal: Any, payload: dict | None, path: str, *, bounded: bool = True) -> str | None:
    """The end user's id as the caller gave it (see the module docstring for where it comes from)."""
    if getattr(principal, "is_end_user", False) and principal.subject:
        return principal.subject
    if payload is None:
        return None
    if path == ANTHROPIC_PATH:
        metadata = payload.get("metadata")
        field, value = "metadata.user_id", metadata.get("user_id") if isinstance(metadata, dict) else None
    else:
        field, value = "user", payload.get("user")
    if not isinstance(value, str) or not value:
        return None
    if bounded and len(value) > MAX_END_USER_CHARS:
        raise GatewayError(400, f"{field} is longer than {MAX_END_USER_CHARS} characters: it names an end user "
                           "and is counted under that name", param=field, code="invalid_value")
    return value
