"""/docs loads nothing from another origin (issue 29, finding 9).

The gateway's origin is where the playground keeps its key: a script from a CDN running there
could read it. The page names only the gateway's own assets, its Content-Security-Policy allows
nothing else, and the assets are served (without a key, like the page) as vendored.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.gateway import READ_KEY, serving

VENDORED = Path(__file__).resolve().parents[3] / "gateway" / "http" / "swagger_ui"


async def test_the_docs_page_and_its_assets_come_from_the_gateway_alone(make_settings):
    async with serving(make_settings(api_keys=[READ_KEY])) as client:  # keys on: the page is public anyway
        page = await client.get("/docs")
        assets = {name: await client.get(f"/docs/assets/{name}")
                  for name in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png")}
        redoc = await client.get("/redoc")
        schema = await client.get("/openapi.json")
    assert page.status_code == 200 and "SwaggerUIBundle" in page.text
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
    assert urls and all(url.startswith("/docs/assets/") for url in urls), urls
    assert "url: '/openapi.json'" in page.text and schema.status_code == 200
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self' 'unsafe-inline'" in policy
    assert "http" not in policy  # no other origin anywhere in it
    for name, answer in assets.items():
        assert answer.status_code == 200, name
        assert answer.content == (VENDORED / name).read_bytes(), name
    assert assets["swagger-ui-bundle.js"].headers["content-type"].startswith("text/javascript")
    assert redoc.status_code in (401, 404)  # ReDoc (CDN-loaded) is not served
