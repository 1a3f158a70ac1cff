"""The notification endpoint: one request in, one text out. Requests run in worker threads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from messages import greet, set_language, unread


def handle(request: dict[str, Any]) -> dict[str, str]:
    set_language(request.get("lang", "en"))
    text = greet(request["name"])
    if request.get("unread"):
        text += " " + unread(request["unread"])
    return {"to": request["name"], "text": text}


def handle_all(requests: list[dict[str, Any]], workers: int = 8) -> list[dict[str, str]]:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(handle, requests))
