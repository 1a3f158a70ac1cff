"""Avatar image URLs, sized for the place they are shown in."""

from __future__ import annotations

from cache import CACHE, make_key
from directory import fetch_user

CDN = "https://img.example.net"


def avatar_url(user_id: int, size: int) -> str:
    def compute() -> str:
        photo = fetch_user(user_id)["photo"]
        return f"{CDN}/{size}x{size}/{photo}"

    return CACHE.get_or_compute(make_key("avatar", user_id, size), compute)
