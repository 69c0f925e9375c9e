"""The playground's files: served without a key, with the security headers, only when turned on.

The real app (create_app: middleware, features, lifespan) in process, in front of the fake
engine; the browser tests (tests/playground, marked integration) load the same files in Chromium.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from importlib import resources

import httpx
import pytest
from pydantic import ValidationError

from gateway.app import create_app
from playground.settings import PlaygroundSettings
from tests.support.fake_engine import settings_for

KEY = "sk-playground-unit-0123456789"
EXPECTED_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
    "require-trusted-types-for 'script'; trusted-types 'none'"
)
STATIC = resources.files("playground").joinpath("static")


def static_files() -> dict[str, str]:
    """Every file under playground/static, read from the package (not through the server)."""
    found: dict[str, str] = {}

    def walk(folder, prefix):
        for entry in folder.iterdir():
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            else:
                found[f"{prefix}{entry.name}"] = entry.read_text(encoding="utf-8")

    walk(STATIC, "")
    return found


FILES = static_files()
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
                 ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}


@contextlib.asynccontextmanager
async def playground_app(fake_engine, tmp_path, **settings) -> AsyncIterator[httpx.AsyncClient]:
    values = {"database_url": f"sqlite+aiosqlite:///{tmp_path}/market.db", "session_store": "off"} | settings
    app = create_app(settings_for(fake_engine, **values))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client:
            yield client


@pytest.fixture
async def client(fake_engine, tmp_path) -> AsyncIterator[httpx.AsyncClient]:
    """A gateway with an API key, on loopback, PLAYGROUND unset (auto: see conftest.py)."""
    async with playground_app(fake_engine, tmp_path, api_keys=[KEY]) as client:
        yield client


# --- what is served, and how ------------------------------------------------------------------


def test_the_package_ships_the_page_and_its_modules():
    assert {"index.html", "playground.css", "icon.svg", "js/main.js", "js/chat.js", "js/sse.js"} <= set(FILES)


async def test_every_file_is_served_without_a_key_with_the_csp_and_security_headers(client):
    for name in sorted(FILES):
        response = await client.get(f"/playground/{name}")
        assert response.status_code == 200, name
        assert response.text == FILES[name], name
        assert response.headers["content-type"] == CONTENT_TYPES[name[name.rfind("."):]], name
        assert response.headers["content-security-policy"] == EXPECTED_CSP, name
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["cross-origin-opener-policy"] == "same-origin"
        assert response.headers["cross-origin-resource-policy"] == "same-origin"
        assert response.headers["permissions-policy"].startswith("geolocation=(self),")
        assert response.headers["cache-control"] == "no-cache"
        assert re.fullmatch(r'"[0-9a-f]{32}"', response.headers["etag"]), name


async def test_the_page_is_served_at_the_slash_and_the_bare_path_redirects_to_it(client):
    index = await client.get("/playground/")
    bare = await client.get("/playground")
    assert index.status_code == 200 and index.text == FILES["index.html"]
    assert index.headers["content-security-policy"] == EXPECTED_CSP
    assert bare.status_code == 308 and bare.headers["location"] == "playground/"


async def test_an_unchanged_file_is_revalidated_with_a_304(client):
    first = await client.get("/playground/js/chat.js")
    again = await client.get("/playground/js/chat.js", headers={"If-None-Match": first.headers["etag"]})
    other = await client.get("/playground/js/chat.js", headers={"If-None-Match": '"0000"'})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == first.headers["etag"]
    assert again.headers["content-security-policy"] == EXPECTED_CSP
    assert other.status_code == 200 and other.text == FILES["js/chat.js"]


async def test_head_answers_like_get_without_a_body(client):
    response = await client.head("/playground/")
    assert response.status_code == 200 and response.content == b""
    assert response.headers["content-security-policy"] == EXPECTED_CSP


async def test_anything_but_the_page_files_is_a_404(client):
    paths = ["/playground/nope.js", "/playground/js/", "/playground/%2e%2e/pyproject.toml",
             "/playground/..%2fsettings.py", "/playground/settings.py", "/playground/js/../../routes.py",
             "/playground/__init__.py"]
    for path in paths:
        response = await client.get(path, headers={"Authorization": f"Bearer {KEY}"})
        assert response.status_code == 404, path


async def test_only_the_page_is_public_the_api_still_needs_the_key(client):
    assert (await client.get("/playground/")).status_code == 200
    assert (await client.get("/v1/models")).status_code == 401
    assert (await client.get("/api/places", params={"q": "sura"})).status_code == 401
    assert (await client.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})).status_code == 200


# --- PLAYGROUND=auto|on|off -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "host", "served"),
    [
        (None, "127.0.0.1", True),
        ("auto", "::1", True),
        ("auto", "0.0.0.0", False),
        ("auto", "10.1.2.3", False),
        ("on", "0.0.0.0", True),
        ("true", "0.0.0.0", True),
        ("off", "127.0.0.1", False),
        ("FALSE", "127.0.0.1", False),
        ("0", "127.0.0.1", False),
    ],
)
async def test_the_setting_decides_whether_the_page_is_served(fake_engine, tmp_path, monkeypatch, value, host, served):
    if value is not None:
        monkeypatch.setenv("PLAYGROUND", value)
    # A key is configured, so the gateway keeps a non-loopback host instead of refusing it.
    async with playground_app(fake_engine, tmp_path, api_keys=[KEY], host=host) as client:
        paths = ["/playground", "/playground/", "/playground/js/main.js"]
        statuses = [(await client.get(path)).status_code for path in paths]
    if served:
        assert statuses == [308, 200, 200]
    else:
        # Turned off, the page's paths are 404 like paths that do not exist (no key asked).
        assert statuses == [404, 404, 404]


def test_an_unknown_setting_value_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("PLAYGROUND", "sometimes")
    with pytest.raises(ValidationError, match="playground"):
        PlaygroundSettings()


# --- built to last: nothing from elsewhere, nothing inline, every control labelled ----------

URL_LIKE = re.compile(r"(?i)(?:\b[a-z][a-z0-9+.-]*:)?//[a-z0-9.-]+")
SVG_NAMESPACE = "http://www.w3.org/2000/svg"


@pytest.mark.parametrize("name", sorted(FILES))
def test_no_file_names_anything_on_another_host(name):
    text = FILES[name]
    if name.endswith(".svg"):
        text = text.replace(f'xmlns="{SVG_NAMESPACE}"', "")  # a namespace name, never fetched
    assert URL_LIKE.findall(text) == []
    assert "@import" not in text


class _PageParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.texts: dict[int, str] = {}
        self._open: list[int] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}))
        if tag in ("button", "label", "script", "style"):
            self._open.append(len(self.elements) - 1)

    def handle_endtag(self, tag):
        if self._open and self.elements[self._open[-1]][0] == tag:
            self._open.pop()

    def handle_data(self, data):
        for index in self._open:
            self.texts[index] = self.texts.get(index, "") + data


def parsed_page() -> _PageParser:
    parser = _PageParser()
    parser.feed(FILES["index.html"])
    return parser


def test_the_page_has_no_inline_script_or_style_and_no_event_handler_attributes():
    page = parsed_page()
    scripts = [(attrs, page.texts.get(i, "")) for i, (tag, attrs) in enumerate(page.elements) if tag == "script"]
    assert scripts and all(attrs.get("src") and attrs.get("type") == "module" and not text.strip()
                           for attrs, text in scripts)
    assert not [tag for tag, _ in page.elements if tag == "style"]
    assert not [(tag, name) for tag, attrs in page.elements for name in attrs if name == "style" or name.startswith("on")]


@pytest.mark.parametrize("name", sorted(n for n in FILES if n.endswith(".js")))
def test_the_scripts_never_evaluate_strings_or_write_html(name):
    code = FILES[name]
    for forbidden in (r"\beval\s*\(", r"\bnew\s+Function\b", r"\.innerHTML\b", r"\.outerHTML\b",
                      r"insertAdjacentHTML\s*\(", r"document\.write", r"\bnew\s+EventSource\b",
                      r"set(?:Timeout|Interval)\(\s*[\"'`]"):
        assert not re.search(forbidden, code), f"{name} matches {forbidden}"


def test_every_form_control_of_the_page_has_a_label_and_every_button_a_name():
    page = parsed_page()
    labelled = {attrs.get("for") for tag, attrs in page.elements if tag == "label"}
    controls = [(tag, attrs) for tag, attrs in page.elements if tag in ("input", "select", "textarea")]
    assert controls
    unlabelled = [attrs.get("id") for tag, attrs in controls if attrs.get("id") not in labelled and "aria-label" not in attrs]
    assert unlabelled == []
    buttons = [(i, attrs) for i, (tag, attrs) in enumerate(page.elements) if tag == "button"]
    assert all(page.texts.get(i, "").strip() or attrs.get("aria-label") for i, attrs in buttons)
