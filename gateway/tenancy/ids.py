"""Ids of keys and teams, key secrets, and the digests the database keeps instead of them.

A database key's secret is ``sk-gw-`` and 43 URL-safe characters (256 random bits). The
prefix tells the middleware which bearer tokens to look up in the database at all (a token
of another form never costs a query) and lets secret scanners recognise a leaked key. The
database keeps the secret's SHA-256 only, plus its first ``DISPLAY_PREFIX_CHARS`` characters
to show (``sk-gw-AbCd…``): enough to tell keys apart in a list, far too little to guess the
rest. A plain digest without salt is enough here: the secret is random and long, so there
is no dictionary to try, and the lookup by digest is one index probe.

A key's id (``key_`` + 16 hex digits) is what logs, metric labels and owners of stored data
call it; it stays the same when the key is rotated, so what the key owns stays its own.
"""

from __future__ import annotations

import hashlib
import re
import secrets

KEY_PREFIX = "sk-gw-"
DISPLAY_PREFIX_CHARS = 12
_SECRET_BYTES = 32
KEY_ID = re.compile(r"^key_[0-9a-f]{16}$")
TEAM_ID = re.compile(r"^team_[0-9a-f]{16}$")


def new_key_id() -> str:
    return "key_" + secrets.token_hex(8)


def new_team_id() -> str:
    return "team_" + secrets.token_hex(8)


def new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(_SECRET_BYTES)


def secret_digest(secret: str) -> str:
    """What the database keeps of a secret (and looks it up by): SHA-256, hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def display_prefix(secret: str) -> str:
    return secret[:DISPLAY_PREFIX_CHARS]


def looks_like_key(token: str) -> bool:
    """Whether ``token`` has a database key's form (checked before any lookup)."""
    return token.startswith(KEY_PREFIX) and len(token) == len(KEY_PREFIX) + 43
