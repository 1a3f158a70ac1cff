"""One run as one self-contained HTML file: the console's timeline (``timeline.js``) and style
(``console.css``) inlined, the run's events embedded as JSON. ``fabric show RUN --html``
writes it; the service sends the same file at ``GET /runs/{run_id}/html``.

The file needs no network and runs no script but its own: a ``Content-Security-Policy`` meta
allows the one inline script and the one inline style by their sha256 hashes, nothing else
(no other script, no connections, no forms, no frames, images only as ``data:``). The events
sit in a ``<script type="application/json">`` data block, which is never executed; every
``<``, ``>`` and ``&`` in it is written ``\\u003c``/``\\u003e``/``\\u0026`` and everything
outside ASCII (U+2028 and U+2029 included) as a ``\\u`` escape, so no text in a run can end
the block or start markup. The page shows every value from the run as text.

Redaction is the caller's: pass events as they may be shown (``fabric show`` redacts them
with the secrets it knows; the service with its own).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from functools import cache
from importlib.resources import files
from typing import Any

STATIC = "http/console/static"
"""The console's static files, beneath ``fabric.interfaces``."""

_BOOT = "\nmountShare(document);\n"
_CLOSERS = re.compile(r"</script|<!--|<script|</style", re.IGNORECASE)


@cache
def static_text(name: str) -> str:
    """A console static file (``timeline.js``, ``console.css``) as text, newlines as ``\\n``
    (an HTML parser turns ``\\r\\n`` into ``\\n`` before a hash is checked)."""
    text = files("fabric.interfaces").joinpath(f"{STATIC}/{name}").read_text("utf-8")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def csp_hash(text: str) -> str:
    """``'sha256-…'``: the CSP source that allows an inline script or style of ``text``."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def embed_json(value: Any) -> str:
    """JSON that is safe inside a ``<script type="application/json">`` element: ASCII only,
    and no ``<``, ``>`` or ``&`` (each only ever inside a JSON string, where the ``\\u``
    escape means the same)."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def share_script() -> str:
    """The share file's one script: ``timeline.js`` and the call that mounts it."""
    return _checked(static_text("timeline.js") + _BOOT, "timeline.js")


def share_style() -> str:
    return _checked(static_text("console.css"), "console.css")


def share_csp(script: str, style: str) -> str:
    return (
        f"default-src 'none'; script-src {csp_hash(script)}; style-src {csp_hash(style)}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )


def share_html(events: list[dict[str, Any]], *, title: str) -> str:
    """The share file of a run's ``events`` (runlog order), titled ``title``."""
    script, style = share_script(), share_style()
    shown_title = _clean(title)
    data = embed_json({"title": shown_title, "events": events})
    csp = html.escape(share_csp(script, style), quote=False)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="agent-fabric">
<link rel="icon" href="data:,">
<title>{html.escape(shown_title)}</title>
<style>{style}</style>
</head>
<body>
<div class="share">
<header class="share-head"><h1 id="share-title"></h1>
<p class="muted">A run of agent-fabric, saved with <code>fabric show RUN --html</code>.</p>
</header>
<noscript><p>This page needs JavaScript to show the run; the events are in the page source
(the fabric-run block).</p></noscript>
<div id="timeline"></div>
</div>
<script type="application/json" id="fabric-run">{data}</script>
<script type="module">{script}</script>
</body>
</html>
"""


def _checked(text: str, name: str) -> str:
    """Our own file inlined: it must not be able to end its element early."""
    found = _CLOSERS.search(text)
    if found:
        raise ValueError(f"{name} holds {found.group(0)!r}, which would end its inline element")
    return text


def _clean(text: str) -> str:
    """Text that encodes as UTF-8 (a lone surrogate becomes ``?``)."""
    return text.encode("utf-8", "replace").decode("utf-8")
