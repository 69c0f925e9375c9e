"""Who owns a file, a batch or a webhook event: the one place that decides it.

Today the owner is the calling API key's id (``Principal.key_id``, safe to store and log).
When teams exist (issue 24), a team's keys may share their files and batches: this function
is where that changes, and nothing else reads the principal for ownership.
"""

from __future__ import annotations

from gateway.http.auth import Principal


def owner_of(principal: Principal) -> str:
    return principal.key_id
