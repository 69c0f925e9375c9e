"""Key ids: what logs, metric labels, usage counters and owners of stored data call an API key.

A key id is the first 16 hex digits (64 bits) of HMAC-SHA256(secret, SHA-256(key)). The
SHA-256 digest is what the server knows of every key, including keys configured hashed
(``sha256:<hex>``), so both forms of one key get one id. The secret keeps a key id from
confirming a guessed key offline: an unsalted digest prefix (what ids were before) let
anyone who saw a log line or a metrics label test candidate keys at hashing speed.

Owners are stored by key id (resumable sessions, stored responses, marketplace users and
conversations), so the id must stay the same across restarts and be the same on every
replica that shares a database. Where the secret comes from, in order:

1. ``KEY_ID_SECRET``: set it, the same value on every replica, whenever the gateway runs as
   more than one process that does not share a data directory (several hosts, containers).
2. unset, and ``DATABASE_URL`` is a SQLite file: a random secret generated at the first start
   and kept beside it in ``key-id-secret`` (mode 0600); every later start and every worker on
   that directory reads the same one.
3. otherwise (PostgreSQL, an in-memory database, or a SQLite directory that cannot be written):
   a random secret for this process alone, with a warning: key ids then change at each restart, and what
   was stored under the old ids (sessions, users) is no longer its owner's.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from functools import cache
from pathlib import Path

from gateway.config import Settings, sqlite_database

log = logging.getLogger("gateway.auth")

KEY_ID_HEX_DIGITS = 16
SECRET_FILE_NAME = "key-id-secret"
_SECRET_BYTES = 32


def key_id(digest: bytes, secret: bytes) -> str:
    """The key id of the key whose SHA-256 digest is ``digest``."""
    return hmac.new(secret, digest, hashlib.sha256).hexdigest()[:KEY_ID_HEX_DIGITS]


def secret_from_settings(settings: Settings) -> bytes:
    """The key-id secret for these settings (see the module docstring for the order)."""
    if settings.key_id_secret is not None:
        return settings.key_id_secret.get_secret_value().encode()
    directory = sqlite_directory(settings.database_url)
    if directory is not None:
        try:
            return persisted_secret(directory / SECRET_FILE_NAME)
        except OSError as exc:  # the database's directory is unusable too: the gateway still starts
            log.warning("cannot keep the key-id secret beside the SQLite database (%s): key ids are random for "
                        "this process; set KEY_ID_SECRET", exc.strerror or type(exc).__name__)
            return process_secret()
    if settings.auth_enabled:
        log.warning("KEY_ID_SECRET is not set and DATABASE_URL is not a SQLite file: key ids are random for "
                    "this process, so stored owners (sessions, marketplace users) change at each restart and "
                    "differ between replicas; set KEY_ID_SECRET")
    return process_secret()


@cache
def process_secret() -> bytes:
    """A random secret drawn once per process (every app this process assembles agrees on it)."""
    return secrets.token_bytes(_SECRET_BYTES)


def sqlite_directory(database_url: str) -> Path | None:
    """The directory of a SQLite file URL (``sqlite+aiosqlite:///./data/stack.db``), else None."""
    database = sqlite_database(database_url)
    return Path(database).parent if database is not None else None


def persisted_secret(path: Path) -> bytes:
    """The secret kept in ``path``, created (random, mode 0600) if there is none yet.

    Written to a temporary file and linked into place, so workers starting together agree:
    the first link wins and every process reads what it wrote.
    """
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(secrets.token_hex(_SECRET_BYTES) + "\n")
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another process won: use its secret
    finally:
        temporary.unlink(missing_ok=True)
    return _read(path)


def _read(path: Path) -> bytes:
    value = path.read_text().strip()
    if len(value) < 32:
        raise ValueError(f"{path} holds no key-id secret (expected 64 hex digits); delete it to make a new one")
    return value.encode()
