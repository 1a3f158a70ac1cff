"""Turns post titles into URL slugs."""

from __future__ import annotations

import re
import unicodedata


def slugify(title: str, sep: str = "_", max_length: int = 60) -> str:
    """A lower-case ASCII slug of ``title``: words joined by ``sep``, at most ``max_length``
    characters, cut at a word boundary where possible."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    words = re.findall(r"[a-z0-9]+", ascii_title.lower())
    slug = sep.join(words)
    if len(slug) <= max_length:
        return slug
    cut = slug[:max_length]
    if sep in cut:
        cut = cut[: cut.rindex(sep)]
    return cut.strip(sep)
