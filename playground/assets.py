"""The page's files, read once from the package data, each with its content type and ETag.

Everything under ``playground/static/`` is served under ``/playground/<relative path>``; a
name that is not one of those files is a 404, so no request can reach anything else on disk.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}
INDEX = "index.html"


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str  # a strong validator: the quoted start of the body's SHA-256


def load_assets() -> dict[str, Asset]:
    """Every static file of the package, by its path relative to ``static/`` ("js/chat.js")."""
    root = resources.files("playground").joinpath("static")
    assets: dict[str, Asset] = {}
    for name, entry in _walk(root, ""):
        suffix = name[name.rfind("."):] if "." in name else ""
        if suffix not in CONTENT_TYPES:
            continue  # only the kinds of file a page is made of
        body = entry.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        assets[name] = Asset(body=body, content_type=CONTENT_TYPES[suffix], etag=etag)
    if INDEX not in assets:
        raise RuntimeError("the playground package has no static/index.html (broken install?)")
    return assets


def asset_names() -> frozenset[str]:
    """The relative names ``load_assets`` serves, without reading the files."""
    root = resources.files("playground").joinpath("static")
    return frozenset(name for name, _ in _walk(root, "") if any(name.endswith(s) for s in CONTENT_TYPES))


def _walk(folder: Traversable, prefix: str):
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        if entry.is_dir():
            yield from _walk(entry, f"{prefix}{entry.name}/")
        else:
            yield f"{prefix}{entry.name}", entry
