"""Marketplace service errors: gateway errors, so the app renders them as ``{"detail": ...}``.

Services raise these; the routes let them through. Each message names the
field or the entity it is about.
"""

from __future__ import annotations

from fastapi.exceptions import RequestValidationError

from gateway.api import GatewayError


class NotFound(GatewayError):
    def __init__(self, entity: str, entity_id: object, *, field: str | None = None) -> None:
        where = f"{field}: " if field else ""
        super().__init__(404, f"{where}{entity} {entity_id} not found", param=field, code="not_found")


class Conflict(GatewayError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(409, f"{field}: {message}", param=field, code="conflict")


class Forbidden(GatewayError):
    def __init__(self, message: str) -> None:
        super().__init__(403, message, code="forbidden")


class DatabaseUnavailable(GatewayError):
    """503: the marketplace's database cannot serve now (``marketplace.database.availability``); try again later."""

    def __init__(self, *, problem: str, starting: bool, retry_after: int) -> None:
        state = "is not up yet" if starting else "is unavailable"
        super().__init__(503, f"the marketplace's database {state} ({problem}); try again in {retry_after} s",
                         code="database_unavailable", headers={"Retry-After": str(retry_after)})


def invalid_field(location: str, field: str, message: str) -> RequestValidationError:
    """A 422 in FastAPI's own shape (``detail`` is a list naming ``loc``), for checks done by hand."""
    return RequestValidationError(
        [{"loc": (location, field), "msg": message, "type": "value_error", "input": None}]
    )
