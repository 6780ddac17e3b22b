"""The status page (PROTOCOL §16): one self-contained HTML file, served at ``GET /ui``.

``index.html`` beside this module holds the whole page: its markup, one
``<style>`` and one ``<script>``, no other file, no request to any other
host.  It holds no secret: the browser reads the token from the URL's
fragment (``/ui#token=...``, which never reaches the server) and offers it
as the auth subprotocol of the websocket, like any browser client (§2).

The page is served with a strict Content-Security-Policy: nothing may load
but the page itself; its one script and its one style are allowed by their
SHA-256 hashes (computed here from the file, so an edit of the page can never
leave a stale hash behind); it may connect only to its own origin (the
daemon's websocket); no frame, form, base URL or plugin; Trusted Types
required, so no string ever reaches an HTML sink.  With ``nosniff``,
``no-referrer`` and ``no-store`` beside it.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from importlib.resources import files

from oma_bridge._version import __version__

__all__ = ["UI_PATH", "page"]

UI_PATH = "/ui"

_VERSION_MARK = "{{version}}"
#: What a ``Host`` header may hold to be written into ``connect-src`` (it has
#: passed the Host check already; this keeps any odd byte out of the header).
_HOST = re.compile(r"[a-z0-9.-]+:[0-9]+|\[[0-9a-f:.]+\]:[0-9]+")


def _only(text: str, tag: str) -> str:
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", text, flags=re.DOTALL)
    if len(found) != 1:
        raise RuntimeError(f"the status page must have exactly one <{tag}>, not {len(found)}")
    return str(found[0])


def _hash(source: str) -> str:
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


@functools.cache
def _load() -> tuple[str, str, str]:
    """The page (version filled in) and the CSP hashes of its script and its style."""
    text = files(__package__).joinpath("index.html").read_text(encoding="utf-8")
    text = text.replace(_VERSION_MARK, __version__)
    return text, _hash(_only(text, "script")), _hash(_only(text, "style"))


def page(host: str, *, tls: bool) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The page's body and headers, for a request whose (checked) ``Host`` is ``host``."""
    body, script, style = _load()
    connect = "'self'"
    if _HOST.fullmatch(host.lower()):
        # 'self' covers ws: of the same origin in CSP 3; older browsers need it spelled out.
        connect += f" {'wss' if tls else 'ws'}://{host.lower()}"
    policy = "; ".join(
        (
            "default-src 'none'",
            f"script-src {script}",
            f"style-src {style}",
            "img-src data:",
            f"connect-src {connect}",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
            "require-trusted-types-for 'script'",
            "trusted-types 'none'",
        )
    )
    headers = (
        ("Content-Type", "text/html; charset=utf-8"),
        ("Content-Security-Policy", policy),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("Cache-Control", "no-store"),
        ("X-Frame-Options", "DENY"),
        ("Cross-Origin-Opener-Policy", "same-origin"),
        ("Cross-Origin-Resource-Policy", "same-origin"),
    )
    return body, headers
