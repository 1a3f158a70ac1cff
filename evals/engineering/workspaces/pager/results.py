"""Renders one page of search results as text for the terminal client."""

from __future__ import annotations

from paginate import get_page


def render(hits: list[str], number: int, per_page: int = 10) -> str:
    page = get_page(hits, number, per_page)
    first = (page.number - 1) * per_page + 1
    lines = [f"{first + i}. {hit}" for i, hit in enumerate(page.items)]
    nav = []
    if page.has_previous:
        nav.append("< prev")
    nav.append(f"page {page.number}/{page.total_pages}")
    if page.has_next:
        nav.append("next >")
    return "\n".join([*lines, " | ".join(nav)])
