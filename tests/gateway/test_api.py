"""gateway.api: what the public feature API answers about keys (``Gateway.key_acts_for_users``)."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

from gateway.api import Gateway
from gateway.config import Settings
from gateway.http.auth import KeyRing

SECRET = "s" * 32


def gateway_for(**keys) -> Gateway:
    return Gateway(SimpleNamespace(settings=Settings(key_id_secret=SECRET, **keys)), openai=None)


def key_id(settings_keys: dict, key: str) -> str:
    """The key id the middleware gives ``key`` (its KeyRing, from the same settings)."""
    return KeyRing.from_settings(Settings(key_id_secret=SECRET, **settings_keys)).authenticate(key).key_id


async def test_app_and_admin_keys_act_for_users_and_read_keys_do_not():
    keys = dict(api_keys=["sk-read", "sk-both"], app_api_keys=["sk-app", "sk-both",
                                                                 "sha256:" + hashlib.sha256(b"sk-hashed").hexdigest()],
                admin_api_keys=["sk-admin"])
    gateway = gateway_for(**keys)
    for key in ("sk-app", "sk-hashed", "sk-admin", "sk-both"):
        assert await gateway.key_acts_for_users(key_id(keys, key)), key
    assert not await gateway.key_acts_for_users(key_id(keys, "sk-read"))
    assert not await gateway.key_acts_for_users("local")
    assert not await gateway.key_acts_for_users("0123456789abcdef")


async def test_a_removed_key_no_longer_acts_for_users():
    before = dict(app_api_keys=["sk-app", "sk-gone"])
    gone = key_id(before, "sk-gone")
    assert await gateway_for(**before).key_acts_for_users(gone)
    assert not await gateway_for(app_api_keys=["sk-app"]).key_acts_for_users(gone)
    assert not await gateway_for(app_api_keys=["sk-app"], api_keys=["sk-gone"]).key_acts_for_users(gone)


async def test_without_keys_only_the_local_caller_acts_for_users():
    gateway = gateway_for()
    assert await gateway.key_acts_for_users("local")
    assert not await gateway.key_acts_for_users(key_id(dict(app_api_keys=["sk-app"]), "sk-app"))
