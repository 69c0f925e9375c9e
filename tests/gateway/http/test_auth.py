"""API keys: hashed at load, resolved to roles, named by an HMAC key id, read from the Authorization header."""

from __future__ import annotations

import hashlib
import hmac
import os
import subprocess
import sys

import pytest

from gateway.config import Settings
from gateway.http.auth import KeyRing, bearer_token
from gateway.http.key_ids import SECRET_FILE_NAME, key_id, secret_from_settings, sqlite_directory

SECRET = b"a-key-id-secret-for-the-tests-000"


def ring(**keys) -> KeyRing:
    return KeyRing(**{"read_keys": [], "write_keys": [], **keys}, secret=SECRET)


def test_keyring_resolves_roles_and_stores_no_clear_text():
    hashed = "sha256:" + hashlib.sha256(b"admin-key").hexdigest()
    keys = ring(read_keys=["read-key"], app_keys=["app-key"], write_keys=[hashed])
    read, app, admin = keys.authenticate("read-key"), keys.authenticate("app-key"), keys.authenticate("admin-key")
    assert (read.role, read.can_write, read.acts_for_users) == ("read", False, False)
    assert (app.role, app.can_write, app.acts_for_users) == ("app", False, True)
    assert (admin.role, admin.can_write, admin.acts_for_users) == ("admin", True, True)
    assert keys.authenticate("nope") is None
    assert "read-key" not in repr(keys.__dict__) and "app-key" not in repr(keys.__dict__)


def test_a_key_listed_under_several_roles_gets_the_highest():
    keys = ring(read_keys=["k"], app_keys=["k"])
    assert keys.authenticate("k").role == "app"
    assert ring(read_keys=["k"], app_keys=["k"], write_keys=["k"]).authenticate("k").role == "admin"


def test_key_id_is_an_hmac_of_the_digest_with_the_secret():
    digest = hashlib.sha256(b"read-key").digest()
    expected = hmac.new(SECRET, digest, hashlib.sha256).hexdigest()[:16]
    assert ring(read_keys=["read-key"]).authenticate("read-key").key_id == expected
    # Not the unsalted digest prefix any more: the id alone cannot confirm a guessed key.
    assert not hashlib.sha256(b"read-key").hexdigest().startswith(expected[:12])
    assert key_id(digest, b"another-secret-entirely-0000000") != expected


def test_a_hashed_entry_and_the_clear_key_get_the_same_id():
    hashed = "sha256:" + hashlib.sha256(b"same-key").hexdigest()
    assert ring(read_keys=[hashed]).authenticate("same-key").key_id == \
        ring(read_keys=["same-key"]).authenticate("same-key").key_id


def test_keyring_rejects_malformed_hashes():
    with pytest.raises(ValueError, match="64 hex digits"):
        ring(read_keys=["sha256:abc"])


def test_the_configured_secret_is_used_and_must_be_long(tmp_path):
    settings = Settings(api_keys=["k"], key_id_secret="s" * 20, database_url=f"sqlite+aiosqlite:///{tmp_path}/x.db")
    assert secret_from_settings(settings) == b"s" * 20
    assert not (tmp_path / SECRET_FILE_NAME).exists()
    with pytest.raises(ValueError, match="KEY_ID_SECRET"):
        Settings(key_id_secret="short")
    assert Settings(key_id_secret="").key_id_secret is None  # empty (compose's unset variable): unset


def test_without_a_secret_one_is_kept_beside_the_sqlite_database(tmp_path):
    settings = Settings(api_keys=["k"], database_url=f"sqlite+aiosqlite:///{tmp_path}/state/stack.db")
    first = KeyRing.from_settings(settings).authenticate("k").key_id
    path = tmp_path / "state" / SECRET_FILE_NAME
    assert path.exists() and (path.stat().st_mode & 0o777) == 0o600
    # A restart (a new key ring from the same settings) names the key the same.
    assert KeyRing.from_settings(settings).authenticate("k").key_id == first
    path.unlink()
    assert KeyRing.from_settings(settings).authenticate("k").key_id != first


def test_processes_starting_together_agree_on_the_secret(tmp_path):
    script = ("import sys; from pathlib import Path; from gateway.http.key_ids import persisted_secret; "
              "sys.stdout.write(persisted_secret(Path(sys.argv[1])).decode())")
    target = str(tmp_path / SECRET_FILE_NAME)
    processes = [subprocess.Popen([sys.executable, "-c", script, target], stdout=subprocess.PIPE, env=os.environ)
                 for _ in range(4)]
    secrets = {process.communicate()[0] for process in processes}
    assert len(secrets) == 1 and len(secrets.pop()) == 64


def test_without_a_file_database_each_process_has_its_own_secret():
    settings = Settings(api_keys=["k"], database_url="postgresql+asyncpg://u@db/x")
    assert secret_from_settings(settings) == secret_from_settings(settings)  # one per process
    script = ("import sys; from gateway.config import Settings; from gateway.http.key_ids import secret_from_settings; "
              "sys.stdout.write(secret_from_settings(Settings(api_keys=['k'], "
              "database_url='postgresql+asyncpg://u@db/x')).hex())")
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert len(other) == 64 and other != secret_from_settings(settings).hex()


@pytest.mark.parametrize(("url", "directory"), [
    ("sqlite+aiosqlite:///./data/stack.db", "data"),
    ("sqlite+aiosqlite:////var/lib/gw/stack.db?mode=rwc", "/var/lib/gw"),
    ("sqlite+aiosqlite:///:memory:", None),
    ("sqlite+aiosqlite://", None),
    ("postgresql+asyncpg://u@h/db", None),
])
def test_sqlite_directory(url, directory):
    found = sqlite_directory(url)
    assert (str(found) if found is not None else None) == directory


@pytest.mark.parametrize(
    ("header", "token"),
    [(b"Bearer abc", "abc"), (b"bearer  abc ", "abc"), (b"Basic abc", None), (b"Bearer", None), (None, None)],
)
def test_bearer_token(header, token):
    assert bearer_token(header) == token


def test_an_unusable_database_directory_costs_the_persistence_not_the_start(tmp_path):
    blocker = tmp_path / "data"
    blocker.write_text("a file where the database's directory should be")
    settings = Settings(api_keys=["k"], database_url=f"sqlite+aiosqlite:///{blocker}/stack.db")
    assert KeyRing.from_settings(settings).authenticate("k").role == "read"


class _TokensWithoutKind:
    """A feature's end-user tokens written against the feature API before ``kind`` existed."""

    token_prefix = "ft-"
    path_prefixes = ("/feature/",)

    async def authenticate(self, token: str):
        return None


class _FeatureWithOldTokens:
    name = "old-tokens"
    router = None
    token_authenticator = _TokensWithoutKind()

    def __init__(self, gateway) -> None:
        from pydantic_settings import BaseSettings

        self.settings = BaseSettings()

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def status(self) -> dict:
        return {"ready": True}


async def test_a_features_unknown_token_is_a_401_even_if_its_authenticator_names_no_kind(tmp_path):
    from tests.support.gateway import serving

    settings = Settings(vllm_base_url="http://127.0.0.1:9", session_store="off", api_keys=["k" * 20],
                        database_url=f"sqlite+aiosqlite:///{tmp_path}/g.db")
    async with serving(settings, features={"old-tokens": _FeatureWithOldTokens}) as gateway:
        answer = await gateway.get("/feature/x", headers={"Authorization": "Bearer ft-unknown"})
    assert answer.status_code == 401, answer.text  # (was a 500: AttributeError on ``kind``)
    assert "invalid, expired or revoked token" in answer.text
