"""The chat part's request and response bodies: a chat message, its answer, a stored conversation."""

from __future__ import annotations

import unicodedata
import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, StrictBool, field_validator

from gateway.api import SESSION_ID_MAX, SESSION_ID_RULE, is_valid_session_id
from marketplace.inputs import Input
from marketplace.places.schemas import Location, location_from_text
from marketplace.search.schemas import SearchHit

CHAT_MESSAGE_MAX = 4000


class ChatRequest(Input):
    # Required with an API key; with an end-user token it defaults to the token's user.
    user_id: uuid.UUID | None = None
    message: str = Field(min_length=1, max_length=CHAT_MESSAGE_MAX)
    # The conversation to add to, by the name the client gave it; sent as ``session_id``.
    conversation_name: str | None = Field(None, min_length=1, max_length=SESSION_ID_MAX, validation_alias="session_id")
    location: Location | None = None
    stream: StrictBool = False

    _location = field_validator("location", mode="before")(location_from_text)

    @field_validator("message")
    @classmethod
    def _bounded_after_normalisation(cls, value: str) -> str:
        # The prompt builder NFKC-normalises the message, which can expand a character up to
        # 18-fold (U+FDFA); the limit must hold for the text that reaches the parser and engine.
        normalised = len(unicodedata.normalize("NFKC", value))
        if normalised > CHAT_MESSAGE_MAX:
            raise ValueError(f"message must be at most {CHAT_MESSAGE_MAX} characters after Unicode "
                             f"NFKC normalisation (this one has {normalised})")
        return value

    @field_validator("conversation_name")
    @classmethod
    def _conversation_name(cls, value: str | None) -> str | None:
        if value is not None and not is_valid_session_id(value):
            raise ValueError(f"session_id {SESSION_ID_RULE}")
        return value


class ChatOut(BaseModel):
    answer: str
    products: list[SearchHit]
    conversation_id: str
    conversation_name: str = Field(serialization_alias="session_id")
    parsed: dict[str, Any]
    fallback: list[str]
    finish_reason: str | None
    usage: dict[str, Any] | None


class MessageOut(BaseModel):
    id: int
    role: str
    content: str
    timestamp: datetime
    details: dict[str, Any] | None


class ConversationOut(BaseModel):
    id: str
    user_id: str
    conversation_name: str = Field(serialization_alias="session_id")
    created_at: datetime
    messages: list[MessageOut]
