"""Serve the page's files under ``/playground/``, with the security headers and revalidation.

``/playground`` redirects to ``/playground/`` (relative ``Location``, so a reverse proxy that
mounts the gateway under a prefix keeps working), which is ``index.html``; the page's own
links are relative too. With the page turned off (``PLAYGROUND``), every path answers 404
exactly like a path that does not exist.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.exceptions import HTTPException
from starlette.responses import Response

from playground.assets import INDEX, Asset, asset_names
from playground.headers import CACHE_CONTROL, SECURITY_HEADERS

BASE_PATH = "/playground"

# Served without an API key (the middleware's public paths): the page must load before it can
# ask for a key. They are files of the package, the same for everyone, holding no data.
PUBLIC_PATHS = frozenset({BASE_PATH, f"{BASE_PATH}/"} | {f"{BASE_PATH}/{name}" for name in asset_names()})

router = APIRouter(include_in_schema=False)


async def get_assets(request: Request) -> dict[str, Asset]:
    feature = getattr(request.app.state, "playground", None)
    assets = getattr(feature, "assets", None)
    if assets is None:  # turned off, or the feature is not started
        raise HTTPException(404, "Not Found")
    return assets


AssetsDep = Annotated[dict[str, Asset], Depends(get_assets)]


@router.api_route(BASE_PATH, methods=["GET", "HEAD"])
async def playground_root(_: AssetsDep) -> Response:
    return Response(status_code=308, headers={"location": "playground/", **SECURITY_HEADERS})


@router.api_route(f"{BASE_PATH}/{{name:path}}", methods=["GET", "HEAD"])
async def playground_file(name: str, request: Request, assets: AssetsDep) -> Response:
    asset = assets.get(name or INDEX)
    if asset is None:
        raise HTTPException(404, "Not Found")
    headers = {"etag": asset.etag, "cache-control": CACHE_CONTROL, **SECURITY_HEADERS}
    if asset.etag in _etags(request.headers.get("if-none-match", "")):
        return Response(status_code=304, headers=headers)
    return Response(asset.body, media_type=asset.content_type, headers=headers)


def _etags(header: str) -> set[str]:
    """The entity tags of an If-None-Match header (weak ones compare by their opaque part)."""
    return {tag.strip().removeprefix("W/") for tag in header.split(",") if tag.strip()}
