"""The model field of a multipart upload is resolved like any other request's; nothing else changes.

Bodies are encoded by httpx, as the OpenAI SDK sends them, so the expected bytes come from a
real client, not from the code under test.
"""

from __future__ import annotations

import httpx
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gateway.http.errors import GatewayError
from gateway.protocols.engine_api.multipart import MAX_PARTS, with_model

AUDIO = b"RIFF\r\n--not-the-boundary\r\nname=\"model\"\r\n\r\nfake"
CONTENT_TYPE = "multipart/form-data; boundary=b0und4ry"


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


def refused(body: bytes, content_type: str = CONTENT_TYPE) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        with_model(body, content_type, resolve)
    assert caught.value.status == 400
    return caught.value


def test_an_alias_is_replaced_and_every_other_byte_kept():
    body, model = with_model(upload(b"stack-2.9"), CONTENT_TYPE, resolve)
    assert model == "qwen3-embedded"
    assert body == upload(b"qwen3-embedded")


def test_a_served_name_or_no_model_leaves_the_body_as_sent():
    for model in (b"qwen3-embedded", None):
        body, _ = with_model(upload(model), 'multipart/form-data; boundary="b0und4ry"', resolve)
        assert body == upload(model)


def test_no_model_part_asks_for_the_default():
    asked = []
    body, model = with_model(upload(None), CONTENT_TYPE, lambda name: asked.append(name))
    assert (body, model, asked) == (upload(None), None, [None])


def test_not_multipart_is_a_400():
    for content_type in ("application/json", "multipart/form-data"):
        assert refused(upload(b"x"), content_type).param == "content-type"


def test_a_model_that_is_not_utf8_is_a_400_naming_model():
    assert refused(upload(b"\xff\xfe")).param == "model"


def test_two_model_parts_are_a_400_naming_model():
    # The engine would read one, the gateway could route by the other: neither is guessed.
    twice = upload(b"stack-2.9").replace(b"--b0und4ry--", b'--b0und4ry\r\nContent-Disposition: form-data; '
                                                          b'name="model"\r\n\r\nother\r\n--b0und4ry--')
    assert refused(twice).param == "model"


@pytest.mark.parametrize("disposition", [b'form-data; name=model', b'form-data; name="model"; x="a;b"',
                                         b'FORM-DATA;NAME="model"', b'form-data; name="model"; filename="m.txt"'])
def test_the_model_part_is_found_however_its_disposition_is_written(disposition):
    body = (b"--B\r\nContent-Disposition: %s\r\ncontent-type: text/plain\r\n\r\nstack-2.9\r\n--B--\r\n"
            % disposition)
    replaced, model = with_model(body, "multipart/form-data; boundary=B", resolve)
    assert model == "qwen3-embedded"
    assert replaced == body.replace(b"stack-2.9", b"qwen3-embedded")


@pytest.mark.parametrize("disposition", [b'form-data; name="model_id"', b'form-data; name="file"; filename="model"',
                                         b'form-data; name="x-model"', b"form-data; name*=UTF-8''model"])
def test_a_part_not_named_model_is_not_the_model(disposition):
    body = b"--B\r\nContent-Disposition: %s\r\n\r\nstack-2.9\r\n--B--\r\n" % disposition
    assert with_model(body, "multipart/form-data; boundary=B", resolve) == (body, None)


def test_the_repeated_disposition_body_of_the_report_is_a_400_naming_the_body():
    # Issue 29: a regex took cubic time on it (1.7 s at 14.8 KB, hours at the 4 MB limit).
    body = b"--B\r\ncontent-disposition:name=model\r\n" * 400
    error = refused(body, "multipart/form-data; boundary=B")
    assert error.param == "body" and "could not be parsed" in error.message


@pytest.mark.parametrize("body", [
    upload(b"stack-2.9").removesuffix(b"--b0und4ry--\r\n"),  # no closing boundary
    upload(b"stack-2.9")[:40],                                   # cut inside the first part's headers
    b"preamble\r\n" + upload(b"stack-2.9"),                      # text before the first boundary
    upload(b"stack-2.9").replace(b"Content-Type: audio/wav", b"Content Type: audio/wav"),  # a header without a name
    b"",
])
def test_a_malformed_body_is_a_400_naming_the_body(body):
    assert refused(body).param == "body"


def test_a_boundary_longer_than_the_parser_takes_is_a_400():
    boundary = b"b" * 300
    assert refused(upload(b"x", boundary), f"multipart/form-data; boundary={boundary.decode()}").param == "content-type"


def test_more_parts_than_the_engine_takes_is_a_400():
    part = b'--B\r\nContent-Disposition: form-data; name="f"\r\n\r\nx\r\n'
    assert with_model(part * MAX_PARTS + b"--B--\r\n", "multipart/form-data; boundary=B", resolve)[1] is None
    assert refused(part * (MAX_PARTS + 1) + b"--B--\r\n", "multipart/form-data; boundary=B").param == "body"


def test_a_disposition_with_very_many_parameters_is_a_400():
    body = b'--B\r\nContent-Disposition: form-data; name="model"' + b"; a=b" * 40 + b"\r\n\r\nx\r\n--B--\r\n"
    assert refused(body, "multipart/form-data; boundary=B").param == "body"


# --- whatever a client sends: bodies encoded by httpx -----------------------------------------

FIELD_NAMES = st.sampled_from(["language", "prompt", "temperature", "response_format", "model_name", "Model"])
VALUES = st.lists(st.sampled_from(["\r\n", "--", "-B", "\r\n-", "model", 'name="model"', "é", "x", " ", ";"]),
                  max_size=8).map("".join)
BYTES = st.lists(st.sampled_from([b"\r\n", b"--", b"-B", b"\r\n-", b"\r\n--B-", b"\x00", b"\xff", b"RIFF", b"\r"]),
                 max_size=10).map(b"".join)
MODELS = st.sampled_from(["stack-2.9", "qwen3-embedded", "", "two\r\nlines"])
BOUNDARIES = st.sampled_from(["B", "b0und4ry", "----WebKitFormBoundary7MA4YWxk"])


def encoded(fields: list[tuple[str, str]], audio: bytes, boundary: str) -> tuple[bytes, str]:
    request = httpx.Request("POST", "http://gateway/v1/audio/transcriptions", data=dict(fields),
                            files={"file": ("a.wav", audio, "audio/wav")},
                            headers={"content-type": f"multipart/form-data; boundary={boundary}"})
    return request.read(), request.headers["content-type"]


def encodable(fields: list[tuple[str, str]], audio: bytes, boundary: str) -> bool:
    """Whether no value holds the delimiter (a client picks a boundary that no value holds)."""
    delimiter = b"\r\n--" + boundary.encode()
    return all(delimiter not in b"\r\n" + value for value in [audio, *(v.encode() for _, v in fields)])


@given(before=st.lists(st.tuples(FIELD_NAMES, VALUES), max_size=3, unique_by=lambda f: f[0]),
       model=MODELS, audio=BYTES, boundary=BOUNDARIES)
def test_any_client_body_keeps_every_byte_but_the_resolved_model(before, model, audio, boundary):
    fields = [*before, ("model", model)]
    assume(encodable(fields, audio, boundary))
    body, content_type = encoded(fields, audio, boundary)
    replaced, named = with_model(body, content_type, lambda name: {"stack-2.9": "qwen3-embedded"}.get(name))
    expected_model = "qwen3-embedded" if model == "stack-2.9" else model
    assert named == expected_model
    assert replaced == encoded([*before, ("model", expected_model)], audio, boundary)[0]


@given(fields=st.lists(st.tuples(FIELD_NAMES, VALUES), max_size=4, unique_by=lambda f: f[0]), audio=BYTES,
       boundary=BOUNDARIES)
def test_any_client_body_without_a_model_is_relayed_as_sent(fields, audio, boundary):
    assume(encodable(fields, audio, boundary))
    body, content_type = encoded(fields, audio, boundary)
    assert with_model(body, content_type, resolve) == (body, None)
