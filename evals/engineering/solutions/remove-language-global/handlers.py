"""The notification endpoint: one request in, one text out. Requests run in worker threads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from messages import greet, unread


def handle(request: dict[str, Any]) -> dict[str, str]:
    lang = request.get("lang", "en")
    text = greet(request["name"], lang)
    if request.get("unread"):
        text += " " + unread(request["unread"], lang)
    return {"to": request["name"], "text": text}


def handle_all(requests: list[dict[str, Any]], workers: int = 8) -> list[dict[str, str]]:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(handle, requests))
