"""The response headers of every playground file: one home for the page's security policy.

The Content-Security-Policy allows only this origin's own files: scripts and styles from the
playground's files (no inline script or style, no ``eval``), ``fetch`` to the gateway's own
origin, no frames, forms, plugins or fonts from anywhere. Trusted Types are required with no
policy allowed, so the page cannot turn a string into HTML at all (it builds every element
with ``createElement``/``textContent``): text from the model, the catalogue or an error can
never become markup. Files are revalidated on every load (``no-cache`` with an ETag): they
have no content hash in their names, so a gateway upgrade reaches the browser at once, and
an unchanged file costs a 304.
"""

from __future__ import annotations

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
        "require-trusted-types-for 'script'",
        "trusted-types 'none'",
    ]
)

SECURITY_HEADERS: dict[str, str] = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
    # The marketplace tab may ask for the browser's location; nothing else is ever used.
    "permissions-policy": "geolocation=(self), camera=(), microphone=(), payment=(), usb=()",
}

CACHE_CONTROL = "no-cache"
