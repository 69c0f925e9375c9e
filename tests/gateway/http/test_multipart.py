"""The multipart boundary check shared by the upload and audio routes."""

from __future__ import annotations

import pytest

from gateway.files.upload import boundary_of as upload_boundary
from gateway.http.errors import GatewayError
from gateway.protocols.engine_api.multipart import boundary_of as audio_boundary


@pytest.mark.parametrize(("content_type", "boundary"), [
    ("multipart/form-data; boundary=abc123", b"abc123"),
    ('Multipart/Form-Data; charset=utf-8; BOUNDARY="with space"', b"with space"),
])
def test_the_boundary_is_read_however_it_is_written(content_type, boundary):
    assert upload_boundary(content_type) == boundary == audio_boundary(content_type)


@pytest.mark.parametrize(("check", "holds"), [(upload_boundary, "the file and its purpose"),
                                               (audio_boundary, "an audio file and its fields")])
def test_another_body_is_a_400_naming_the_header_and_what_the_form_holds(check, holds):
    with pytest.raises(GatewayError) as refused:
        check("application/json")
    assert (refused.value.status, refused.value.param) == (400, "content-type")
    assert refused.value.message == f"this route takes a multipart/form-data body ({holds})"
    with pytest.raises(GatewayError) as no_boundary:
        check("multipart/form-data")
    assert (no_boundary.value.status, no_boundary.value.param) == (400, "content-type")
    assert no_boundary.value.message == "the multipart Content-Type has no boundary"
