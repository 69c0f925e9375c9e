"""What every request body and query of the marketplace shares: the strict base, NUL refusal, id and page bounds.

Every bound is enforced before any database work, so bad input is a 422 naming the field and
nothing is written. Unknown fields are refused rather than ignored: a misspelt
``stock_quantiy`` must not silently do nothing. Each part's ``schemas`` module builds its
bodies on :class:`Input`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from marketplace.errors import invalid_field

NAME_MAX = 200  # a supplier's, product's or user's name
PAGE_LIMIT_MAX = 100
MAX_ID = 2**31 - 1  # ids are 32-bit integers in both databases

Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX)]


def has_nul(value: Any) -> bool:
    """True if a NUL character hides anywhere in ``value`` (PostgreSQL text and JSONB refuse it)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(has_nul(v) for v in value)
    return False


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if has_nul(value):
            raise ValueError("must not contain NUL characters")
        return value


def refuse_nul(**params: str | None) -> None:
    """422 for a query parameter holding a NUL character (no database can compare with it)."""
    for name, value in params.items():
        if value and has_nul(value):
            raise invalid_field("query", name, "must not contain NUL characters")
