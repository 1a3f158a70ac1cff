"""Post metadata for the blog's index page."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from slug import slugify


@dataclass(frozen=True)
class Post:
    title: str
    published: date

    @property
    def url(self) -> str:
        return post_url(self.title)


def post_url(title: str) -> str:
    return f"/posts/{slugify(title)}"


def index(posts: list[Post]) -> list[str]:
    """Lines for the index page, newest first."""
    ordered = sorted(posts, key=lambda p: p.published, reverse=True)
    return [f"{p.published.isoformat()}  {p.title}  {p.url}" for p in ordered]
