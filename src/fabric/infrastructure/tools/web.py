"""Web tools: fetch_url and web_search. (Being implemented.)"""

from __future__ import annotations

from fabric.application.context import ToolContext
from fabric.config.schema import WebSettings


async def fetch_url(ctx: ToolContext, url: str, web: WebSettings) -> str:
    """Fetch a web page and return its readable text.

    Args:
        url: An http(s) URL.
    """
    raise NotImplementedError


async def web_search(ctx: ToolContext, query: str, web: WebSettings) -> str:
    """Search the web.

    Args:
        query: What to search for.
    """
    raise NotImplementedError
