"""Tenancy's exceptions as HTTP, in one place: unknown id 404, conflict 409, a value the database cannot
hold 400, database down 503."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from gateway.http.errors import GatewayError
from gateway.tenancy.errors import Conflict, NotFound, StoreUnavailable, ValueRefused


@contextlib.contextmanager
def mapped() -> Iterator[None]:
    try:
        yield
    except NotFound as exc:
        raise GatewayError(404, str(exc), code="not_found", param=f"{exc.kind}_id")
    except Conflict as exc:
        raise GatewayError(409, str(exc), code="conflict", param=exc.field)
    except ValueRefused as exc:
        raise GatewayError(400, str(exc), code="invalid_value")
    except StoreUnavailable as exc:
        raise GatewayError(503, f"{exc}; retry shortly", code="store_unavailable", headers={"retry-after": "1"})


def invalid(field: str, message: str) -> GatewayError:
    return GatewayError(400, f"{field}: {message}", param=field, code="invalid_value")
