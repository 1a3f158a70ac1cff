"""A run as one self-contained HTML file: ``share_html(events, title=...)``.

Placeholder of the API branch (issue 14): the console's branch brings the full run view (the
console's own timeline script and styles, inlined). This one keeps the same promises, which
its tests check: the events ride in a ``<script type="application/json" id="fabric-run">``
with every ``<`` written ``\\u003c`` (so nothing in them can end the element), everything is
shown as text, and a Content-Security-Policy meta tag lets run only the one inline script and
style, by their sha256 hashes (no network, no other script).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Sequence
from typing import Any

_SCRIPT = """
(() => {
  const events = JSON.parse(document.getElementById("fabric-run").textContent);
  const list = document.getElementById("events");
  for (const event of events) {
    const item = document.createElement("li");
    const head = document.createElement("strong");
    head.textContent = `${event.seq} ${event.kind}`;
    const body = document.createElement("pre");
    body.textContent = JSON.stringify(event, null, 2);
    item.append(head, body);
    list.append(item);
  }
})();
"""
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
ol { padding-left: 1.5rem; }
pre { white-space: pre-wrap; word-break: break-word; background: #f6f6f6; padding: .5rem; }
"""


def share_html(events: Sequence[dict[str, Any]], *, title: str) -> str:
    """The page: ``title`` as text, the events as embedded JSON, and the script that lists
    them (as text only)."""
    data = json.dumps(list(events), ensure_ascii=False, separators=(",", ":"), default=str)
    data = data.replace("<", "\\u003c")  # no "</script>" or "<!--" can appear in it
    policy = (
        f"default-src 'none'; script-src '{_sha256(_SCRIPT)}'; style-src '{_sha256(_STYLE)}'; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
    shown = html.escape(title)
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{html.escape(policy)}">\n'
        f"<title>{shown}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f'<h1>{shown}</h1>\n<ol id="events"></ol>\n'
        f'<script type="application/json" id="fabric-run">{data}</script>\n'
        f"<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )


def _sha256(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")
