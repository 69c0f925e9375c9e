"""The users part's request and response bodies: users and their end-user tokens."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, StrictBool, StrictInt, field_validator

from marketplace.inputs import Input, Name
from marketplace.places.schemas import Location, location_from_text
from marketplace.users.models import EMAIL_MAX

PREFERENCES_MAX_BYTES = 4096

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def _bounded_preferences(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None and len(json.dumps(value, ensure_ascii=False).encode()) > PREFERENCES_MAX_BYTES:
        raise ValueError(f"preferences must be at most {PREFERENCES_MAX_BYTES} bytes of JSON")
    return value


class UserCreate(Input):
    name: Name
    email: str = Field(max_length=EMAIL_MAX)
    location: Location | None = None
    ai_access_enabled: StrictBool = False
    preferences: dict[str, Any] = Field(default_factory=dict)

    _location = field_validator("location", mode="before")(location_from_text)

    @field_validator("email")
    @classmethod
    def _email(cls, value: str) -> str:
        if not _EMAIL.match(value):
            raise ValueError("email must look like name@example.com")
        return value.lower()

    _preferences = field_validator("preferences")(_bounded_preferences)


class UserUpdate(Input):
    """Any subset of a user's fields but the email (which names the user: register another instead)."""

    name: Name | None = None
    location: Location | None = None
    ai_access_enabled: StrictBool | None = None
    preferences: dict[str, Any] | None = None

    _location = field_validator("location", mode="before")(location_from_text)

    _preferences = field_validator("preferences")(_bounded_preferences)


# End-user tokens (users.tokens): short-lived, a day at most.
TOKEN_TTL_DEFAULT = 3600
TOKEN_TTL_MAX = 24 * 3600


class TokenCreate(Input):
    ttl_seconds: StrictInt = Field(TOKEN_TTL_DEFAULT, ge=60, le=TOKEN_TTL_MAX)


class TokenOut(BaseModel):
    token_id: str
    token: str = Field(description="shown once: the gateway keeps only its SHA-256")
    user_id: str
    expires_at: datetime


class UserOut(BaseModel):
    id: str
    name: str
    email: str
    location: Location | None
    ai_access_enabled: bool
    preferences: dict[str, Any]
    created_at: datetime

    @classmethod
    def of(cls, user) -> "UserOut":
        location = None if user.lat is None else Location(lat=user.lat, lng=user.lng)
        return cls(
            id=user.public_id,
            name=user.name,
            email=user.email,
            location=location,
            ai_access_enabled=user.ai_access_enabled,
            preferences=dict(user.preferences or {}),
            created_at=user.created_at,
        )
