"""API keys: hashed at load, resolved to rights, read from the Authorization header."""

from __future__ import annotations

import hashlib

import pytest

from gateway.http.auth import KeyRing, bearer_token


def test_keyring_resolves_rights_and_stores_no_clear_text():
    hashed = "sha256:" + hashlib.sha256(b"admin-key").hexdigest()
    ring = KeyRing(read_keys=["read-key"], write_keys=[hashed])
    assert ring.authenticate("read-key").can_write is False
    assert ring.authenticate("admin-key").can_write is True
    assert ring.authenticate("nope") is None
    assert "read-key" not in repr(ring.__dict__)


def test_keyring_rejects_malformed_hashes():
    with pytest.raises(ValueError, match="64 hex digits"):
        KeyRing(read_keys=["sha256:abc"], write_keys=[])


@pytest.mark.parametrize(
    ("header", "token"),
    [(b"Bearer abc", "abc"), (b"bearer  abc ", "abc"), (b"Basic abc", None), (b"Bearer", None), (None, None)],
)
def test_bearer_token(header, token):
    assert bearer_token(header) == token
