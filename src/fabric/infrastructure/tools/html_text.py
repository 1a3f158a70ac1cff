"""HTML to readable text for fetch_url: Markdown with ATX headings and absolute links; scripts,
styles and embedded media dropped. Imported only when a page is HTML (markdownify and
BeautifulSoup are slow to import)."""

from __future__ import annotations

from typing import Any

import httpx
from markdownify import MarkdownConverter


def html_to_text(html: str, base_url: str) -> str:
    return _Readable(base_url).convert(html)


class _Readable(MarkdownConverter):
    """HTML to Markdown: ATX headings, absolute links, no scripts, styles or embedded media."""

    def __init__(self, base_url: str) -> None:
        super().__init__(
            heading_style="ATX", bullets="-", escape_asterisks=False, escape_underscores=False
        )
        self._base = httpx.URL(base_url)

    def convert_a(self, el: Any, text: str, parent_tags: set[str]) -> str:
        href, text = str(el.get("href") or "").strip(), text.strip()
        if not text or not href or href.startswith(("#", "javascript:")):
            return text
        try:
            href = str(self._base.join(href))
        except httpx.InvalidURL:
            return text
        return text if "_noformat" in parent_tags else f"[{text}]({href})"

    def convert_img(self, el: Any, text: str, parent_tags: set[str]) -> str:
        alt = " ".join(str(el.get("alt") or "").split())
        return f"[image: {alt}]" if alt else ""

    def _drop(self, el: Any, text: str, parent_tags: set[str]) -> str:
        return ""

    convert_script = convert_style = convert_noscript = convert_template = _drop
    convert_svg = convert_iframe = convert_canvas = convert_object = convert_embed = _drop
