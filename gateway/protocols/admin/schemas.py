"""What the admin API takes and gives. Validation errors name the field (400, OpenAI's envelope)."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.http.inputs import storable_text
from gateway.tenancy.model import KeyRole, Limits, Priority, as_utc
from gateway.tenancy.records import KeyRecord, TeamRecord

Name = Field(min_length=1, max_length=200)
MAX_MODELS = 256
MAX_GRACE_SECONDS = 30 * 86400


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    _storable = field_validator("*")(storable_text)


def _future(value: dt.datetime | None) -> dt.datetime | None:
    if value is None:
        return None
    value = as_utc(value)
    if value <= dt.datetime.now(dt.UTC):
        raise ValueError("must be in the future")
    return value


def _models(value: list[str] | None) -> list[str] | None:
    if value is None:
        return None
    if len(value) > MAX_MODELS or any(not 0 < len(model) <= 200 for model in value):
        raise ValueError(f"at most {MAX_MODELS} model names of 1 to 200 characters")
    return list(dict.fromkeys(value))


class KeyCreate(_Body):
    name: str = Name
    role: KeyRole = "read"
    team_id: str | None = None
    models: list[str] | None = Field(None, description="the models it may use; null: every model")
    limits: Limits = Limits()
    priority: Priority | None = Field(None, description="default: the team's band, else standard")
    weight: float | None = Field(None, gt=0, le=1000, description="fairness weight within the band; default: "
                                 "the team's, else 1")
    expires_at: dt.datetime | None = None

    _expiry = field_validator("expires_at")(_future)
    _model_names = field_validator("models")(_models)


class KeyUpdate(_Body):
    name: str | None = Field(None, min_length=1, max_length=200)
    role: KeyRole | None = None
    team_id: str | None = None
    models: list[str] | None = None
    limits: Limits | None = None
    priority: Priority | None = None
    weight: float | None = Field(None, gt=0, le=1000)
    expires_at: dt.datetime | None = None

    _expiry = field_validator("expires_at")(_future)
    _model_names = field_validator("models")(_models)


class Rotation(_Body):
    grace_seconds: float | None = Field(None, ge=0, le=MAX_GRACE_SECONDS,
                                        description="how long the old secret keeps working; default "
                                                    "KEY_ROTATION_GRACE_SECONDS")


class TeamCreate(_Body):
    name: str = Name
    limits: Limits = Limits()
    priority: Priority = "standard"
    weight: float = Field(1.0, gt=0, le=1000)


class TeamUpdate(_Body):
    name: str | None = Field(None, min_length=1, max_length=200)
    limits: Limits | None = None
    priority: Priority | None = None
    weight: float | None = Field(None, gt=0, le=1000)


NOT_NULL = {"name", "role", "limits", "priority", "weight"}


def changes(body: BaseModel) -> dict:
    """The fields a PATCH sent (``null`` clears those that may be empty: team, models, expiry)."""
    sent = body.model_dump(exclude_unset=True)
    nulls = [name for name in NOT_NULL if name in sent and sent[name] is None]
    if nulls:
        raise ValueError(nulls[0])
    if "limits" in sent:
        sent["limits"] = body.limits
    return sent


def _when(moment: dt.datetime | None) -> int | None:
    return int(moment.timestamp()) if moment is not None else None


def key_json(record: KeyRecord, *, secret: str | None = None) -> dict:
    """A key as the API shows it; ``secret`` only in the answer that created or rotated it."""
    body = {"object": "api_key", "id": record.id}
    if secret is not None:
        body["key"] = secret
    return body | {
        "name": record.name, "role": record.role, "team_id": record.team_id,
        "models": list(record.models) if record.models is not None else None,
        "limits": record.limits.model_dump(), "priority": record.priority, "weight": record.weight,
        "prefix": record.prefix, "expires_at": _when(record.expires_at), "revoked_at": _when(record.revoked_at),
        "created_at": _when(record.created_at), "updated_at": _when(record.updated_at),
        "previous_key_expires_at": _when(record.previous_secret_expires_at),
    }


def team_json(record: TeamRecord) -> dict:
    return {"object": "team", "id": record.id, "name": record.name, "limits": record.limits.model_dump(),
            "priority": record.priority, "weight": record.weight, "created_at": _when(record.created_at),
            "updated_at": _when(record.updated_at)}
