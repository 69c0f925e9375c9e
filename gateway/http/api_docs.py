"""``/docs``: Swagger UI served from the gateway's own files, never from a CDN.

FastAPI's default page loads its script and styles from cdn.jsdelivr.net. The gateway's origin
is also where the playground keeps its API key (``localStorage``), so a script from elsewhere
running there could read it: whoever controls the CDN (or a path to it) would hold the key.
The page here loads Swagger UI 5.35.0 (swagger-ui-dist, Apache-2.0, vendored in
``swagger_ui/``, with its licence) from ``/docs/assets/``, and its Content-Security-Policy lets
it load nothing from anywhere else. (ReDoc, FastAPI's second page, loads from a CDN too and is
not served.) To update the files: ``npm pack swagger-ui-dist@<version>`` and copy
``swagger-ui-bundle.js``, ``swagger-ui.css`` and ``favicon-32x32.png`` with the licence files.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.responses import FileResponse, HTMLResponse

ASSETS = Path(__file__).resolve().parent / "swagger_ui"
ASSET_TYPES = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css",
               "favicon-32x32.png": "image/png"}
ASSET_PATHS = frozenset(f"/docs/assets/{name}" for name in ASSET_TYPES)
# Swagger UI's page starts it with one inline script; everything else comes from this origin.
POLICY = ("default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
          "img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
          "frame-ancestors 'none'")


def api_docs_router(*, title: str, openapi_url: str = "/openapi.json") -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/docs")
    async def docs() -> HTMLResponse:
        page = get_swagger_ui_html(openapi_url=openapi_url, title=f"{title} - API docs",
                                   swagger_js_url="/docs/assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs/assets/swagger-ui.css",
                                   swagger_favicon_url="/docs/assets/favicon-32x32.png")
        page.headers["content-security-policy"] = POLICY
        return page

    for name, media_type in ASSET_TYPES.items():
        router.add_api_route(f"/docs/assets/{name}", _asset(name, media_type), methods=["GET"],
                             include_in_schema=False)
    return router


def _asset(name: str, media_type: str):
    path = ASSETS / name

    async def asset() -> FileResponse:
        return FileResponse(path, media_type=media_type, headers={"cache-control": "public, max-age=86400"})

    return asset
