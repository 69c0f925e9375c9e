"""The model field of a multipart upload is resolved like any other request's; nothing else changes."""

from __future__ import annotations

import pytest

from gateway.http.errors import GatewayError
from gateway.protocols.engine_api.multipart import with_model

AUDIO = b"RIFF\r\n--not-the-boundary\r\nname=\"model\"\r\n\r\nfake"


def upload(model: bytes | None, boundary: bytes = b"b0und4ry") -> bytes:
    parts = [b'--%s\r\nContent-Disposition: form-data; name="file"; filename="model.wav"\r\n'
             b"Content-Type: audio/wav\r\n\r\n%s\r\n" % (boundary, AUDIO)]
    if model is not None:
        parts.append(b'--%s\r\nContent-Disposition: form-data; name="model"\r\n\r\n%s\r\n' % (boundary, model))
    parts.append(b'--%s\r\nContent-Disposition: form-data; name="language"\r\n\r\nen\r\n--%s--\r\n'
                 % (boundary, boundary))
    return b"".join(parts)


def resolve(name):
    return {"stack-2.9": "qwen3-embedded"}.get(name)


def test_an_alias_is_replaced_and_every_other_byte_kept():
    body, model = with_model(upload(b"stack-2.9"), "multipart/form-data; boundary=b0und4ry", resolve)
    assert model == "qwen3-embedded"
    assert body == upload(b"qwen3-embedded")


def test_a_served_name_or_no_model_leaves_the_body_as_sent():
    for model in (b"qwen3-embedded", None):
        body, _ = with_model(upload(model), 'multipart/form-data; boundary="b0und4ry"', resolve)
        assert body == upload(model)


def test_not_multipart_is_a_400():
    for content_type in ("application/json", "multipart/form-data"):
        with pytest.raises(GatewayError) as refused:
            with_model(upload(b"x"), content_type, resolve)
        assert refused.value.status == 400 and refused.value.param == "content-type"
