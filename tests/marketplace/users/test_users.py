"""Users through the HTTP API: registration, look-up, an email unique per app, bad input."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.marketplace.support import (
    APP,
    OTHER_APP,
    WRITE,
    add_user,
    client,
    count_rows,
    database_url,
    fake_engine,
    field_of,
    settings,
)


async def test_user_registers_and_reads_back(client):
    created = await add_user(client, email="Budi@Example.COM", location={"lat": -6.2, "lng": 106.8},
                             preferences={"categories": ["elektronik"]})
    assert created["email"] == "budi@example.com"
    assert created["ai_access_enabled"] is True
    assert str(uuid.UUID(created["id"])) == created["id"]  # a random UUID, not a row number
    response = await client.get(f"/api/users/{created['id']}", headers=APP)
    assert response.status_code == 200
    assert response.json() == created


async def test_ai_access_is_off_unless_asked_for(client):
    response = await client.post("/api/users", json={"name": "C", "email": "c@example.com"}, headers=APP)
    assert response.status_code == 201
    assert response.json()["ai_access_enabled"] is False
    assert response.json()["location"] is None


async def test_duplicate_email_is_409_whatever_the_case(client):
    await add_user(client, email="sama@example.com")
    response = await client.post("/api/users", json={"name": "Dua", "email": "SAMA@example.com"}, headers=APP)
    assert response.status_code == 409
    assert response.json()["detail"].startswith("email:")
    assert await count_rows(client, "users") == 1


async def test_another_app_registering_the_same_email_gets_a_user_of_its_own_and_learns_nothing(client):
    """Issue 29 item 9: an email is unique per owning key, so no answer tells an app another app has it."""
    ours = await add_user(client, email="sama@example.com")
    taken_elsewhere = await client.post("/api/users", json={"name": "Dua", "email": "SAMA@example.com"},
                                        headers=OTHER_APP)
    never_seen = await client.post("/api/users", json={"name": "Dua", "email": "baru@example.com"},
                                   headers=OTHER_APP)
    assert taken_elsewhere.status_code == never_seen.status_code == 201  # the same answer either way
    theirs = taken_elsewhere.json()
    assert theirs["id"] != ours["id"] and theirs["email"] == "sama@example.com" and theirs["name"] == "Dua"
    # Each app reads its own user; neither reaches the other's.
    assert (await client.get(f"/api/users/{ours['id']}", headers=APP)).json()["name"] == "Ani"
    assert (await client.get(f"/api/users/{theirs['id']}", headers=OTHER_APP)).json()["name"] == "Dua"
    assert (await client.get(f"/api/users/{theirs['id']}", headers=APP)).status_code == 404
    # The admin key's users are its own too; a duplicate within one key is still that key's 409.
    assert (await client.post("/api/users", json={"name": "Tiga", "email": "sama@example.com"},
                              headers=WRITE)).status_code == 201
    again = await client.post("/api/users", json={"name": "Empat", "email": "sama@example.com"}, headers=OTHER_APP)
    assert again.status_code == 409 and again.json()["detail"].startswith("email:")
    assert await count_rows(client, "users") == 4


async def test_concurrent_duplicate_emails_create_one_user(client):
    body = {"name": "Balapan", "email": "race@example.com"}
    responses = await asyncio.gather(*[client.post("/api/users", json=body, headers=APP) for _ in range(4)])
    assert sorted(r.status_code for r in responses) == [201, 409, 409, 409]
    assert await count_rows(client, "users") == 1


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"email": "not-an-email"}, "email"),
        ({"email": "a@" + "b" * 250 + ".com"}, "email"),
        ({"name": "n" * 201}, "name"),
        ({"location": {"lat": -100, "lng": 0}}, "lat"),
        ({"location": {"lat": 0, "lng": 200}}, "lng"),
        ({"ai_access_enabled": "yes"}, "ai_access_enabled"),
        ({"preferences": {"x": "y" * 5000}}, "preferences"),
        ({"role": "admin"}, "role"),
        ({"preferences": {"k\x00": "v"}}, "preferences"),
    ],
)
async def test_bad_user_fields_are_refused(client, overrides, field):
    body = {"name": "U", "email": "u@example.com", **overrides}
    response = await client.post("/api/users", json=body, headers=APP)
    assert response.status_code == 422, response.text
    assert field in field_of(response)
    assert await count_rows(client, "users") == 0


async def test_unknown_user_is_404(client):
    nobody = str(uuid.uuid4())
    response = await client.get(f"/api/users/{nobody}", headers=APP)
    assert response.status_code == 404
    assert response.json()["detail"] == f"user {nobody} not found"


async def test_a_row_number_is_no_user_id(client):
    await add_user(client)
    response = await client.get("/api/users/1", headers=APP)
    assert response.status_code == 422 and "user_id" in field_of(response)


async def test_a_user_changes_only_the_fields_sent(client):
    created = await add_user(client, location={"lat": -6.2, "lng": 106.8}, preferences={"bahasa": "id"})
    response = await client.patch(f"/api/users/{created['id']}", json={"name": "Ani S.", "ai_access_enabled": False},
                                  headers=APP)
    assert response.status_code == 200, response.text
    assert response.json() == {**created, "name": "Ani S.", "ai_access_enabled": False}
    cleared = await client.patch(f"/api/users/{created['id']}", json={"location": None}, headers=APP)
    assert cleared.json()["location"] is None and cleared.json()["preferences"] == {"bahasa": "id"}
    refused = await client.patch(f"/api/users/{created['id']}", json={"email": "x@example.com"}, headers=APP)
    assert refused.status_code == 422 and "email" in field_of(refused)


@pytest.mark.parametrize(("text", "field"), [('"name": "U\\ud800"', "name"),
                                             ('"name": "U", "preferences": {"k": "\\udfff"}', "preferences")])
async def test_a_lone_surrogate_is_refused_naming_the_field(client, text, field):
    # (JSON's "\ud800" escape, which Python's JSON parser lets through: no UTF-8 text can hold it)
    body = '{"email": "u@example.com", ' + text + "}"
    response = await client.post("/api/users", content=body.encode(), headers={**APP, "content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert field in field_of(response)
    assert await count_rows(client, "users") == 0
