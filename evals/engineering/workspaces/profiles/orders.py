"""A customer's order history, a page at a time."""

from __future__ import annotations

from cache import CACHE, make_key
from directory import fetch_user

PAGE_SIZE = 10


def order_page(user_id: int, page: int) -> list[str]:
    def compute() -> list[str]:
        orders = fetch_user(user_id)["orders"]
        return orders[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]

    return CACHE.get_or_compute(make_key("orders", user_id, page), compute)
