"""The Files API with the official openai SDK against a real (uvicorn) gateway: shapes, ownership, limits."""

from __future__ import annotations

import asyncio
import io
import time

import httpx
import openai
import pytest

from tests.gateway.batches.conftest import jobs_ready
from tests.support.gateway import OTHER_KEY, READ_KEY, running_gateway

CONTENT = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n' * 3


_clients: list[openai.AsyncOpenAI] = []


def sdk(base_url: str, key: str = READ_KEY) -> openai.AsyncOpenAI:
    client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0)
    _clients.append(client)
    return client


@pytest.fixture(autouse=True)
async def _close_clients():
    yield
    while _clients:
        await _clients.pop().close()


async def test_create_list_retrieve_content_delete(jobs_gateway):
    base_url, _ = jobs_gateway
    client = sdk(base_url)
    created = await client.files.create(file=("requests.jsonl", io.BytesIO(CONTENT)), purpose="batch")
    assert created.id.startswith("file-") and created.object == "file"
    assert (created.bytes, created.filename, created.purpose, created.status) == (len(CONTENT), "requests.jsonl",
                                                                                   "batch", "processed")
    assert created.expires_at is not None and created.expires_at > created.created_at
    assert (await client.files.retrieve(created.id)).model_dump() == created.model_dump()
    assert (await client.files.content(created.id)).content == CONTENT
    listed = [file.id async for file in client.files.list()]
    assert listed == [created.id]
    deleted = await client.files.delete(created.id)
    assert (deleted.id, deleted.deleted) == (created.id, True)
    with pytest.raises(openai.NotFoundError):
        await client.files.retrieve(created.id)


async def test_another_key_sees_nothing(jobs_gateway):
    base_url, _ = jobs_gateway
    mine = await sdk(base_url).files.create(file=("a.jsonl", io.BytesIO(CONTENT)), purpose="batch")
    other = sdk(base_url, OTHER_KEY)
    for call in (other.files.retrieve(mine.id), other.files.content(mine.id), other.files.delete(mine.id)):
        with pytest.raises(openai.NotFoundError):
            await call
    assert [file.id async for file in other.files.list()] == []
    assert (await sdk(base_url).files.retrieve(mine.id)).id == mine.id  # still there


async def test_nul_characters_are_refused_or_replaced(jobs_gateway):
    """PostgreSQL text cannot hold NUL, even to compare: a cursor or purpose holding one is a 400 naming it,
    a file name's becomes U+FFFD as undecodable bytes do (both were 503s 'retry' on PostgreSQL)."""
    base_url, _ = jobs_gateway
    async with httpx.AsyncClient(base_url=base_url, headers={"authorization": f"Bearer {READ_KEY}"}) as client:
        for params, param in (({"after": "\x00"}, "after"), ({"purpose": "b\x00"}, "purpose")):
            response = await client.get("/v1/files", params=params)
            assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text
        upload = (b'--B\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
                  b'--B\r\nContent-Disposition: form-data; name="file"; filename="a\x00b.jsonl"\r\n\r\n' + CONTENT +
                  b"\r\n--B--\r\n")  # (the openai SDK percent-encodes the name: a raw NUL comes from others)
        created = await client.post("/v1/files", content=upload,
                                    headers={"content-type": "multipart/form-data; boundary=B"})
    assert created.status_code == 200 and created.json()["filename"] == "a\ufffdb.jsonl", created.text


async def test_paging_after_limit_order(jobs_gateway):
    base_url, _ = jobs_gateway
    client = sdk(base_url)
    ids = [(await client.files.create(file=(f"{n}.jsonl", io.BytesIO(CONTENT)), purpose="batch")).id
           for n in range(5)]
    first = await client.files.list(limit=2, order="asc")
    assert [file.id for file in first.data] == ids[:2] and first.has_more
    every = [file.id async for file in client.files.list(limit=2, order="asc")]
    assert every == ids
    newest_first = [file.id async for file in client.files.list(limit=3)]
    assert newest_first == ids[::-1]


@pytest.mark.parametrize("purpose", ["fine-tune", "assistants", "nonsense"])
async def test_unsupported_purpose_is_a_400_naming_purpose(jobs_gateway, purpose):
    base_url, _ = jobs_gateway
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk(base_url).files.create(file=("a.jsonl", io.BytesIO(CONTENT)), purpose=purpose)
    assert caught.value.body["param"] == "purpose"
    assert [file async for file in sdk(base_url).files.list()] == []


async def test_size_limit_and_quota(jobs_settings, tmp_path):
    settings = jobs_settings(files_max_bytes=1000, files_quota_bytes_per_key=1500)
    async with running_gateway(settings) as (base_url, app):
        await jobs_ready(base_url)
        client = sdk(base_url)
        with pytest.raises(openai.APIStatusError) as caught:
            await client.files.create(file=("big.jsonl", io.BytesIO(b"x" * 1001)), purpose="batch")
        assert caught.value.status_code == 413 and caught.value.body["code"] == "file_too_large"
        await client.files.create(file=("a.jsonl", io.BytesIO(b"x" * 900)), purpose="batch")
        with pytest.raises(openai.BadRequestError) as caught:
            await client.files.create(file=("b.jsonl", io.BytesIO(b"x" * 900)), purpose="batch")
        assert caught.value.body["code"] == "storage_quota_exceeded"
        assert [file.bytes async for file in client.files.list()] == [900]  # nothing half-kept
        other = sdk(base_url, OTHER_KEY)  # the quota is per key
        assert (await other.files.create(file=("c.jsonl", io.BytesIO(b"x" * 900)), purpose="batch")).bytes == 900


async def test_the_number_of_files_a_key_keeps_is_bounded_empty_ones_too(jobs_settings):
    """Empty files take none of the byte quota: without a count, a key could keep any number of them."""
    async with running_gateway(jobs_settings(files_max_per_key=3)) as (base_url, _):
        await jobs_ready(base_url)
        client = sdk(base_url)
        kept = [await client.files.create(file=(f"e{n}.jsonl", io.BytesIO(b"")), purpose="batch") for n in range(3)]
        with pytest.raises(openai.BadRequestError) as refused:
            await client.files.create(file=("e3.jsonl", io.BytesIO(b"")), purpose="batch")
        other = await sdk(base_url, OTHER_KEY).files.create(file=("o.jsonl", io.BytesIO(b"")), purpose="batch")
        await client.files.delete(kept[0].id)
        again = await client.files.create(file=("e4.jsonl", io.BytesIO(b"")), purpose="batch")
    assert [file.bytes for file in kept] == [0, 0, 0]
    assert refused.value.body["code"] == "storage_quota_exceeded" and "FILES_MAX_PER_KEY" in refused.value.body["message"]
    assert other.id and again.id  # another key has its own count; a deleted file makes room


async def test_uploads_have_their_own_body_limit_not_max_body_bytes(jobs_settings):
    settings = jobs_settings(max_body_bytes=2048, files_max_bytes=200_000, files_quota_bytes_per_key=10**7)
    async with running_gateway(settings) as (base_url, app):
        await jobs_ready(base_url)
        client = sdk(base_url)
        big = b"x" * 200_000  # 100x MAX_BODY_BYTES, exactly FILES_MAX_BYTES
        created = await client.files.create(file=("big.jsonl", io.BytesIO(big)), purpose="batch")
        assert created.bytes == len(big) and (await client.files.content(created.id)).content == big
        with pytest.raises(openai.APIStatusError) as caught:  # one byte more: the upload's own 413
            await client.files.create(file=("big.jsonl", io.BytesIO(big + b"x")), purpose="batch")
        assert caught.value.status_code == 413 and caught.value.body["code"] == "file_too_large"
        assert "200000 bytes (FILES_MAX_BYTES)" in caught.value.body["message"]
        async with httpx.AsyncClient(base_url=base_url, headers={"authorization": f"Bearer {READ_KEY}"}) as raw:
            # Far beyond it (the body's length says so): refused before a byte is read, naming the limit.
            refused = await raw.post("/v1/files", content=b"x" * 300_000,
                                     headers={"content-type": "multipart/form-data; boundary=b"})
            assert refused.status_code == 413 and refused.json()["error"]["code"] == "request_too_large"
            assert "(FILES_MAX_BYTES)" in refused.json()["error"]["message"]

            async def chunks():  # a well-formed upload without Content-Length: counted as it arrives
                yield (b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
                       b'--b\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n\r\n')
                for _ in range(30):
                    yield b"x" * 10_000
                yield b"\r\n--b--\r\n"

            refused = await raw.post("/v1/files", content=chunks(),
                                     headers={"content-type": "multipart/form-data; boundary=b"})
            assert refused.status_code == 413 and "(FILES_MAX_BYTES)" in refused.json()["error"]["message"]
            # Every other route keeps MAX_BODY_BYTES.
            other = await raw.post("/v1/chat/completions", content=b"x" * 3000,
                                   headers={"content-type": "application/json"})
            assert other.status_code == 413 and "2048 bytes (MAX_BODY_BYTES)" in other.json()["error"]["message"]
        assert [file.bytes async for file in client.files.list()] == [len(big)]


async def test_directory_storage_and_retention(jobs_settings, tmp_path):
    settings = jobs_settings(files_storage="directory", files_directory=str(tmp_path / "files"))
    async with running_gateway(settings) as (base_url, app):
        await jobs_ready(base_url)
        client = sdk(base_url)
        created = await client.files.create(file=("a.jsonl", io.BytesIO(CONTENT)), purpose="batch",
                                            expires_after={"anchor": "created_at", "seconds": 3600})
        assert created.expires_at - created.created_at == 3600
        assert (tmp_path / "files" / created.id).read_bytes() == CONTENT
        assert (await client.files.content(created.id)).content == CONTENT


def test_a_files_directory_that_cannot_hold_files_is_refused_at_assembly(jobs_settings, tmp_path):
    # Not a 500 on every upload: stack-gateway turns this refusal into its start-up line (exit 2).
    from gateway.app import create_app

    a_file = tmp_path / "not-a-directory"
    a_file.write_text("x")
    for directory, reason in ((a_file, "is not a directory"), (a_file / "files", "which is no directory")):
        with pytest.raises(ValueError, match=f"FILES_DIRECTORY .*{reason}"):
            create_app(jobs_settings(files_storage="directory", files_directory=str(directory)))
    create_app(jobs_settings(files_storage="directory", files_directory=str(tmp_path / "made" / "later")))


async def test_expired_files_are_gone_and_swept(jobs_settings, tmp_path):
    settings = jobs_settings(files_storage="directory", files_directory=str(tmp_path / "files"),
                             files_retention_seconds=1.0)
    async with running_gateway(settings) as (base_url, app):
        await jobs_ready(base_url)
        client = sdk(base_url)
        created = await client.files.create(file=("a.jsonl", io.BytesIO(CONTENT)), purpose="batch")
        assert created.expires_at - created.created_at == 1
        stored = tmp_path / "files" / created.id
        deadline = time.monotonic() + 30
        while stored.exists():  # the sweeper removes the bytes once the retention ran out
            assert time.monotonic() < deadline, "an expired file was never swept"
            await asyncio.sleep(0.1)
        with pytest.raises(openai.NotFoundError):
            await client.files.retrieve(created.id)


@pytest.mark.parametrize("body,content_type,param", [
    (b"not multipart", "application/json", "content-type"),
    (b"--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--B--\r\n",
     "multipart/form-data; boundary=B", "file"),
    (b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nxx", "multipart/form-data; boundary=B",
     "file"),
])
async def test_malformed_uploads_are_400s_naming_the_field(jobs_gateway, body, content_type, param):
    base_url, _ = jobs_gateway
    async with httpx.AsyncClient() as client:
        response = await client.post(base_url + "/v1/files", content=body,
                                     headers={"authorization": f"Bearer {READ_KEY}", "content-type": content_type})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert [file async for file in sdk(base_url).files.list()] == []
