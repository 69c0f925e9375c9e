"""ENGINE_ADMIN_ROUTES names only admin-capable routes; the admin routes relay only the flags vLLM reads."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from starlette.datastructures import QueryParams

from gateway.config import Settings
from gateway.http.errors import GatewayError
from gateway.protocols.engine_api.routes import _admin_query


def test_only_admin_capable_routes_may_be_enabled():
    assert Settings(engine_admin_routes="/reset_mm_cache").engine_admin_routes == ["/reset_mm_cache"]
    assert Settings(engine_admin_routes="").engine_admin_routes == []
    for path in ("/sleep", "/collective_rpc", "/abort_requests"):
        with pytest.raises(ValidationError):
            Settings(engine_admin_routes=path)


def test_admin_query_flags_are_relayed_in_one_canonical_form():
    assert _admin_query(QueryParams("reset_running_requests=1&other=x")) == "?reset_running_requests=true"
    assert _admin_query(QueryParams("")) == ""
    with pytest.raises(GatewayError) as refused:
        _admin_query(QueryParams("reset_external=maybe"))
    assert refused.value.param == "reset_external"
