"""The Files routes (OpenAI's API): upload, list, retrieve, content, delete; every answer in OpenAI's shapes."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import StreamingResponse

from gateway.files.service import KNOWN_PURPOSES, UPLOAD_PURPOSES, Files
from gateway.files.upload import boundary_of, read_form
from gateway.http.auth import PrincipalDep
from gateway.http.errors import GatewayError
from gateway.http.inputs import refuse_nul
from gateway.http.raw_routes import MULTIPART_EXTRA
from gateway.jobs.owner import owner_of
from gateway.jobs.paging import page

TAGS = ["Files and batches"]
FILES_PATH = "/v1/files"  # the upload's path, which has its own request-body limit (FILES_MAX_BYTES)


def _purpose(value: str | None) -> str:
    if not value:
        raise GatewayError(400, "purpose is required (batch)", param="purpose")
    if value not in UPLOAD_PURPOSES:
        known = "is not supported by this gateway" if value in KNOWN_PURPOSES else "is not a file purpose"
        raise GatewayError(400, f"purpose {value!r} {known}: files here are for batches (purpose 'batch')",
                           param="purpose")
    return value


def _expires_after(fields: dict[str, str]) -> float | None:
    anchor = fields.get("expires_after[anchor]")
    seconds = fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise GatewayError(400, "expires_after.anchor must be 'created_at'", param="expires_after.anchor")
    try:
        value = int(seconds or "")
    except ValueError:
        raise GatewayError(400, "expires_after.seconds must be an integer", param="expires_after.seconds")
    if not 3600 <= value <= 2_592_000:
        raise GatewayError(400, "expires_after.seconds must be between 3600 and 2592000 (30 days)",
                           param="expires_after.seconds")
    return float(value)


def files_router(files: Files) -> APIRouter:
    router = APIRouter(tags=TAGS, dependencies=[Depends(refuse_nul)])

    @router.post(FILES_PATH, summary="Upload a file (multipart: file, purpose=batch)", openapi_extra=MULTIPART_EXTRA)
    async def upload_file(request: Request, principal: PrincipalDep) -> dict:
        boundary = boundary_of(request.headers.get("content-type", ""))
        upload = await files.begin_upload(owner_of(principal))
        try:
            form = await read_form(request.stream(), boundary, upload)
            if form.filename is None:
                raise GatewayError(400, "the upload has no file part (a part named 'file' with a filename)",
                                   param="file")
            purpose = _purpose(form.fields.get("purpose"))
            record = await upload.complete(purpose=purpose, filename=form.filename,
                                           expires_after=_expires_after(form.fields))
        except BaseException:
            await upload.abort()
            raise
        return record.openai()

    @router.get("/v1/files", summary="List your files")
    async def list_files(principal: PrincipalDep, after: str | None = None,
                         limit: Annotated[int | None, Query()] = None,
                         order: Literal["asc", "desc"] | None = None, purpose: str | None = None) -> dict:
        records, has_more = await files.list(owner_of(principal), page(after=after, limit=limit, order=order,
                                                                        default_limit=10_000, max_limit=10_000),
                                             purpose=purpose)
        data = [record.openai() for record in records]
        return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None, "has_more": has_more}

    @router.get("/v1/files/{file_id}", summary="Retrieve a file's record")
    async def retrieve_file(file_id: str, principal: PrincipalDep) -> dict:
        return (await files.get(owner_of(principal), file_id)).openai()

    @router.get("/v1/files/{file_id}/content", summary="Download a file's content")
    async def file_content(file_id: str, principal: PrincipalDep) -> StreamingResponse:
        record = await files.get(owner_of(principal), file_id)
        return StreamingResponse(files.content(record), media_type="application/octet-stream",
                                 headers={"content-length": str(record.bytes)})

    @router.delete("/v1/files/{file_id}", summary="Delete a file")
    async def delete_file(file_id: str, principal: PrincipalDep) -> dict:
        await files.delete(owner_of(principal), file_id)
        return {"id": file_id, "object": "file", "deleted": True}

    return router
