"""Splits a list of search hits into numbered pages for the results screen."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Page:
    number: int
    """1-based page number."""
    items: list[Any]
    total_pages: int

    @property
    def has_next(self) -> bool:
        return self.number < self.total_pages

    @property
    def has_previous(self) -> bool:
        return self.number > 1


def page_count(total: int, per_page: int) -> int:
    """How many pages ``total`` items fill when each page holds ``per_page`` of them."""
    if per_page < 1:
        raise ValueError("per_page must be at least 1")
    return -(-total // per_page)


def get_page(items: list[Any], number: int, per_page: int = 10) -> Page:
    """Page ``number`` (1-based) of ``items``; an empty list still has one (empty) page."""
    pages = max(page_count(len(items), per_page), 1)
    if not 1 <= number <= pages:
        raise IndexError(f"page {number} does not exist (pages 1 to {pages})")
    start = (number - 1) * per_page
    return Page(number, items[start : start + per_page], pages)
