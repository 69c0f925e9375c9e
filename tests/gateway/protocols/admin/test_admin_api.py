"""The admin API end to end through the gateway app: keys, teams, usage; database keys authenticate."""

from __future__ import annotations

import datetime as dt

import httpx
import openai
import pytest

from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, running_gateway, serving


@pytest.fixture
def settings(make_settings):
    return make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY])


@pytest.fixture
async def gateway(settings):
    async with serving(settings) as client:
        yield client


ADMIN = bearer(WRITE_KEY)


async def new_key(gateway, **body) -> dict:
    answer = await gateway.post("/admin/keys", json={"name": "app", **body}, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    return answer.json()


async def test_a_created_key_shows_its_secret_once_and_authenticates(gateway):
    team = (await gateway.post("/admin/teams", json={"name": "search", "limits": {"tpm": 5000},
                                                     "priority": "batch"}, headers=ADMIN)).json()
    created = await new_key(gateway, role="app", team_id=team["id"], models=["m1"],
                            limits={"rpm": 60, "budget_tokens": 10000, "budget_period": "month",
                                    "end_user": {"rpm": 5}})
    assert set(created) >= {"id", "key", "name", "role", "team_id", "models", "limits", "priority", "expires_at",
                            "created_at"}
    assert created["key"].startswith("sk-gw-") and created["prefix"] == created["key"][:12]
    assert (created["team_id"], created["priority"], created["models"]) == (team["id"], "batch", ["m1"])
    assert created["limits"]["rpm"] == 60 and created["limits"]["end_user"]["rpm"] == 5
    shown = (await gateway.get(f"/admin/keys/{created['id']}", headers=ADMIN)).json()
    assert "key" not in shown and created["key"] not in str(shown)
    listed = (await gateway.get("/admin/keys", headers=ADMIN)).json()
    assert [key["id"] for key in listed["data"]] == [created["id"]] and created["key"] not in str(listed)
    answer = await gateway.get("/v1/models", headers=bearer(created["key"]))
    assert answer.status_code == 200


async def test_a_database_admin_key_may_manage_keys_and_a_read_key_may_not(gateway):
    admin = await new_key(gateway, role="admin")
    reader = await new_key(gateway, role="read")
    assert (await gateway.get("/admin/keys", headers=bearer(admin["key"]))).status_code == 200
    for key in (READ_KEY, reader["key"]):
        refused = await gateway.post("/admin/keys", json={"name": "x"}, headers=bearer(key))
        assert refused.status_code == 403
    assert (await gateway.get("/admin/keys")).status_code == 401


async def test_a_revoked_key_is_refused_at_once_on_its_replica(gateway):
    created = await new_key(gateway)
    assert (await gateway.get("/v1/models", headers=bearer(created["key"]))).status_code == 200
    revoked = await gateway.delete(f"/admin/keys/{created['id']}", headers=ADMIN)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    refused = await gateway.get("/v1/models", headers=bearer(created["key"]))
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert (await gateway.get("/admin/keys", headers=ADMIN)).json()["data"] == []
    everything = await gateway.get("/admin/keys", params={"include_revoked": "true"}, headers=ADMIN)
    assert [key["id"] for key in everything.json()["data"]] == [created["id"]]


async def test_rotation_keeps_the_old_secret_for_the_grace_asked_and_ends_it_with_zero(gateway):
    created = await new_key(gateway)
    rotated = (await gateway.post(f"/admin/keys/{created['id']}/rotate", json={"grace_seconds": 600},
                                  headers=ADMIN)).json()
    assert rotated["id"] == created["id"] and rotated["key"] != created["key"]
    assert rotated["previous_key_expires_at"] is not None
    for secret in (created["key"], rotated["key"]):
        assert (await gateway.get("/v1/models", headers=bearer(secret))).status_code == 200
    again = (await gateway.post(f"/admin/keys/{created['id']}/rotate", json={"grace_seconds": 0},
                                headers=ADMIN)).json()
    assert (await gateway.get("/v1/models", headers=bearer(rotated["key"]))).status_code == 401
    assert (await gateway.get("/v1/models", headers=bearer(again["key"]))).status_code == 200


async def test_the_default_grace_is_the_setting(make_settings):
    async with serving(make_settings(admin_api_keys=[WRITE_KEY], key_rotation_grace_seconds=120)) as gateway:
        created = await new_key(gateway)
        rotated = (await gateway.post(f"/admin/keys/{created['id']}/rotate", headers=ADMIN)).json()
        assert rotated["previous_key_expires_at"] - rotated["updated_at"] in (119, 120, 121)


@pytest.mark.parametrize(("body", "field"), [
    ({"name": ""}, "name"),
    ({"name": "k", "role": "owner"}, "role"),
    ({"name": "k", "limits": {"rpm": 0}}, "limits.rpm"),
    ({"name": "k", "limits": {"tpm": "many"}}, "limits.tpm"),
    ({"name": "k", "limits": {"budget_tokens": 10}}, "limits"),
    ({"name": "k", "limits": {"bogus": 1}}, "limits.bogus"),
    ({"name": "k", "priority": "urgent"}, "priority"),
    ({"name": "k", "weight": 0}, "weight"),
    ({"name": "k", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
    ({"name": "k", "expires_at": "9999-12-31T23:59:59-14:00"}, "expires_at"),  # past year 9999 in UTC
    ({"name": "k", "expires_at": "0001-01-01T00:00:00+14:00"}, "expires_at"),  # before year 1 in UTC
    ({"name": "k", "models": [""]}, "models"),
    ({"name": "a\x00b"}, "name"),  # PostgreSQL text cannot hold NUL
    ({"name": "k", "models": ["m\x00"]}, "models"),
])
async def test_validation_errors_name_the_field(gateway, body, field):
    answer = await gateway.post("/admin/keys", json=body, headers=ADMIN)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == field, answer.json()


async def test_unknown_ids_are_404_and_conflicts_409(gateway):
    for method, path in (("GET", "/admin/keys/key_0000000000000000"), ("PATCH", "/admin/keys/key_0000000000000000"),
                         ("DELETE", "/admin/keys/key_0000000000000000"),
                         ("POST", "/admin/keys/key_0000000000000000/rotate"),
                         ("GET", "/admin/teams/team_0000000000000000"), ("DELETE", "/admin/teams/team_0000000000000000")):
        answer = await gateway.request(method, path, json={} if method == "PATCH" else None, headers=ADMIN)
        assert answer.status_code == 404, (method, path)
    missing_team = await gateway.post("/admin/keys", json={"name": "k", "team_id": "team_0000000000000000"},
                                      headers=ADMIN)
    assert missing_team.status_code == 404 and missing_team.json()["error"]["param"] == "team_id"
    team = (await gateway.post("/admin/teams", json={"name": "t"}, headers=ADMIN)).json()
    await new_key(gateway, team_id=team["id"])
    assert (await gateway.delete(f"/admin/teams/{team['id']}", headers=ADMIN)).status_code == 409


async def test_patch_changes_what_it_names_and_refuses_nulls_for_required_fields(gateway):
    created = await new_key(gateway, limits={"rpm": 5})
    changed = (await gateway.patch(f"/admin/keys/{created['id']}", json={"limits": {"tpm": 100}, "models": None,
                                                                         "name": "renamed"}, headers=ADMIN)).json()
    assert (changed["name"], changed["limits"]["tpm"], changed["limits"]["rpm"], changed["role"]) == \
        ("renamed", 100, None, "read")
    refused = await gateway.patch(f"/admin/keys/{created['id']}", json={"name": None}, headers=ADMIN)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "name"
    team = (await gateway.post("/admin/teams", json={"name": "t"}, headers=ADMIN)).json()
    patched = await gateway.patch(f"/admin/teams/{team['id']}", json={"limits": {"rpm": 9}, "weight": 3},
                                  headers=ADMIN)
    assert (patched.json()["limits"]["rpm"], patched.json()["weight"]) == (9, 3.0)


async def test_lists_are_paged(gateway):
    made = sorted([(await new_key(gateway, name=f"k{n}"))["id"] for n in range(3)])
    first = (await gateway.get("/admin/keys", params={"limit": 2}, headers=ADMIN)).json()
    second = (await gateway.get("/admin/keys", params={"limit": 2, "after": first["last_id"]}, headers=ADMIN)).json()
    assert first["has_more"] and not second["has_more"]
    assert [key["id"] for key in first["data"] + second["data"]] == made


async def test_usage_reports_the_ledger_to_admins_and_each_key_its_own(gateway):
    mine = await new_key(gateway)
    ledger = gateway.app.state.tenancy.ledger
    ledger.record(key_id=mine["id"], model="m1", route="/v1/chat/completions", prompt_tokens=12,
                  completion_tokens=5, cached_tokens=4)
    ledger.record(key_id="key_someoneelse00000", model="m2", route="/v1/embeddings", prompt_tokens=7)
    assert await ledger.flush()
    everyone = (await gateway.get("/admin/usage", params={"group_by": "model"}, headers=ADMIN)).json()
    assert {row["model"]: row["total_tokens"] for row in everyone["data"]} == {"m1": 17, "m2": 7}
    own = (await gateway.get("/v1/usage", headers=bearer(mine["key"]))).json()
    assert [(row["model"], row["prompt_tokens"], row["cached_tokens"]) for row in own["data"]] == [("m1", 12, 4)]
    refused = await gateway.get("/v1/usage", params={"group_by": "team"}, headers=bearer(mine["key"]))
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "group_by"
    backwards = await gateway.get("/admin/usage", params={"from": "2030-01-02T00:00:00Z", "to": "2030-01-01T00:00:00Z"},
                                  headers=ADMIN)
    assert backwards.status_code == 400 and backwards.json()["error"]["param"] == "from"


@pytest.mark.parametrize(("query", "field"), [
    ({"to": "9999-12-31T23:59:59-14:00"}, "to"),    # past year 9999 in UTC
    ({"from": "0001-01-01T00:00:00+14:00"}, "from"),  # before year 1 in UTC
])
async def test_usage_times_beyond_the_calendar_are_a_400_naming_them(gateway, query, field):
    for path in ("/admin/usage", "/v1/usage"):
        answer = await gateway.get(path, params=query, headers=ADMIN)
        assert answer.status_code == 400 and answer.json()["error"]["param"] == field, answer.text


async def test_usage_up_to_the_first_day_of_the_calendar_starts_there(gateway):
    """The default range (30 days before ``to``) stops at the calendar's first moment."""
    answer = await gateway.get("/v1/usage", params={"to": "0001-01-02T00:00:00Z"}, headers=ADMIN)
    assert answer.status_code == 200, answer.text
    assert answer.json()["from"] == int(dt.datetime.min.replace(tzinfo=dt.UTC).timestamp())


@pytest.mark.parametrize(("method", "path", "params", "field"), [
    ("GET", "/admin/keys/key_%00", None, "key_id"),
    ("POST", "/admin/keys/key_%00/rotate", None, "key_id"),
    ("DELETE", "/admin/teams/team_%00", None, "team_id"),
    ("GET", "/admin/keys", {"after": "\x00"}, "after"),
    ("GET", "/admin/teams", {"after": "\x00"}, "after"),
    ("GET", "/admin/usage", {"team_id": "\x00"}, "team_id"),
])
async def test_a_nul_character_in_the_path_or_query_is_a_400_naming_it(gateway, method, path, params, field):
    """PostgreSQL refuses NUL even in a comparison: it reached the database and came back a 503 'retry'."""
    answer = await gateway.request(method, path, params=params, headers=ADMIN)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == field, answer.text


async def test_health_shows_the_key_store_and_the_limiter(gateway):
    keys = (await gateway.get("/health", headers=ADMIN)).json()["features"]["keys"]
    assert keys["ready"] and keys["store"] == "up"
    assert keys["limits"] == {"ready": True, "backend": "local", "enforcing": "per replica"}


async def test_the_official_sdk_works_with_a_database_key_on_a_served_gateway(settings):
    async with running_gateway(settings) as (base_url, _app), httpx.AsyncClient(base_url=base_url) as admin:
        created = (await admin.post("/admin/keys", json={"name": "sdk"}, headers=ADMIN)).json()
        client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=created["key"])
        assert (await client.models.list()).data
        assert (await admin.delete(f"/admin/keys/{created['id']}", headers=ADMIN)).json()["deleted"]
        with pytest.raises(openai.AuthenticationError):
            await client.models.list()
        await client.close()


async def test_a_database_that_cannot_be_opened_degrades_keys_alone(make_settings):
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY],
                             database_url="sqlite+aiosqlite:////proc/no-such-dir/gateway.db")
    async with serving(settings, features={}) as gateway:
        assert (await gateway.get("/v1/models", headers=bearer(READ_KEY))).status_code == 200
        admin = await gateway.get("/admin/keys", headers=ADMIN)
        assert admin.status_code == 503 and admin.headers["retry-after"] == "1"
        unknown = await gateway.get("/v1/models", headers=bearer("sk-gw-" + "a" * 43))
        assert unknown.status_code == 503 and unknown.json()["error"]["code"] == "key_store_unavailable"
        health = (await gateway.get("/health", headers=ADMIN)).json()["features"]["keys"]
        assert health["ready"] is False and health["store"] == "down"
