"""Whether a pack's ``web_search`` can work, checked before a run of it starts.

A pack that offers ``web_search`` without a search backend (``web.search`` unset), with one
that does not answer, or without network in its sandbox would start, and every search would
fail some steps later, after the model has been loaded and asked. ``fabric run``, ``fabric
resume`` and ``POST /tasks`` refuse such a run up front with what to put in fabric.yaml;
``fabric doctor`` reports it. Packs without ``web_search`` are not checked.
"""

from __future__ import annotations

from typing import Any

import httpx

from fabric.config.schema import WebSettings
from fabric.domain.errors import ConfigError
from fabric.infrastructure.packs.registry import LoadedPack

PROBE_TIMEOUT = 3.0
"""Seconds the search backend has to answer the probe (any HTTP answer will do)."""
TOOL = "web_search"


class SearchUnavailable(ConfigError):
    """The pack's search backend is configured but does not answer."""

    CODE = "search_unavailable"


def _snippet(pack: str) -> str:
    return (
        "configure a SearXNG instance (with the json format enabled in its settings.yml) in "
        f"fabric.yaml:\n    packs:\n      {pack}:\n        web:\n          search: "
        '{kind: searxng, url: "http://127.0.0.1:8888"}\n'
        "  or, to read only pages the task names, use a pack whose tools are [fetch_url]"
    )


def offers_search(loaded_pack: LoadedPack) -> bool:
    return TOOL in loaded_pack.pack.tool_names()


def _web(loaded_pack: LoadedPack) -> WebSettings:
    web = getattr(loaded_pack.settings, "web", None)
    return web if isinstance(web, WebSettings) else WebSettings()


async def search_problem(
    name: str, loaded_pack: LoadedPack, *, timeout: float = PROBE_TIMEOUT
) -> ConfigError | None:
    """Why pack ``name``'s ``web_search`` cannot work now (None: it can, or the pack has no
    ``web_search``): no backend configured, no network in its sandbox (both ``ConfigError``),
    or the backend does not answer within ``timeout`` seconds (``SearchUnavailable``)."""
    if not offers_search(loaded_pack):
        return None
    search = _web(loaded_pack).search
    if search is None:
        return ConfigError(
            f"pack {name!r} offers {TOOL}, but packs.{name}.web.search is not set, so every "
            "search would fail",
            hint=_snippet(name),
        )
    if not loaded_pack.settings.sandbox.network:
        return ConfigError(
            f"pack {name!r} offers {TOOL}, but its sandbox has no network",
            hint=f"set packs.{name}.sandbox.network: true in fabric.yaml",
        )
    url = str(search.url)
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=timeout) as client:
            await client.get(url)
    except httpx.HTTPError as exc:
        problem = "no answer in time" if isinstance(exc, httpx.TimeoutException) else str(exc)
        return SearchUnavailable(
            f"the search backend of pack {name!r} at {url} does not answer "
            f"({problem or type(exc).__name__})",
            hint=f"start the SearXNG instance, or point packs.{name}.web.search.url in "
            "fabric.yaml at a running one",
        )
    return None


async def search_report(name: str, loaded_pack: LoadedPack) -> dict[str, Any] | None:
    """``fabric doctor``'s line for the pack's ``web_search`` (None: the pack has none)."""
    if not offers_search(loaded_pack):
        return None
    search = _web(loaded_pack).search
    problem = await search_problem(name, loaded_pack)
    report: dict[str, Any] = {
        "ok": problem is None,
        "url": str(search.url) if search is not None else None,
    }
    if problem is not None:
        report["error"] = {"code": problem.code, "message": problem.message, "hint": problem.hint}
    return report
