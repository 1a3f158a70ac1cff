"""How tool search ranks a run's tools for a query (ADR 0028): BM25 over the words of each
tool's name (counted twice) and description. Pure Python and deterministic (ties by name), so
a replay finds what the run found."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from fabric.domain.models import ToolSpec

MAX_QUERY = 500
"""Characters of a query that are searched (the rest is ignored)."""
_K1, _B = 1.2, 0.75
_PART = re.compile(r"[^\W_]+")
_PIECE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_STOP = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "by", "do", "for", "from", "get", "i", "in",
     "is", "it", "its", "me", "my", "need", "of", "on", "or", "that", "the", "this", "to",
     "tool", "use", "want", "what", "which", "with"}
)  # fmt: skip


def words(text: str) -> list[str]:
    """The words of ``text`` as searched: lower case, ``snake_case`` and ``camelCase`` split
    (the whole word kept as well), a plural ``s`` dropped, common words left out."""
    found: list[str] = []
    for part in _PART.findall(text):
        whole = part.lower()
        found.append(whole)
        if not part[1:].islower() and not part.isdigit():  # camelCase, CAPS, digits: pieces
            found += (p for p in map(str.lower, _PIECE.findall(part)) if p != whole)
    return [_stem(w) for w in found if w not in _STOP]


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word[-1] == "s" and word[-2] != "s" else word


class Ranking:
    """BM25 over the tools' names and descriptions."""

    def __init__(self, specs: Sequence[ToolSpec]) -> None:
        self.names = [s.name for s in specs]
        self.docs = [Counter(words(s.name) * 2 + words(s.description)) for s in specs]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.average = (sum(self.lengths) / len(self.docs)) if self.docs else 1.0
        df: Counter[str] = Counter()
        for doc in self.docs:
            df.update(doc.keys())
        n = len(self.docs)
        self.idf = {w: math.log((n - f + 0.5) / (f + 0.5) + 1) for w, f in df.items()}

    def ranked(self, query: str) -> list[str]:
        """The names of the tools whose words hold any of ``query``'s, best first."""
        terms = list(dict.fromkeys(words(query[:MAX_QUERY])))
        scored: list[tuple[float, str]] = []
        for at, doc in enumerate(self.docs):
            score = 0.0
            for term in terms:
                tf = doc.get(term, 0)
                if tf:
                    norm = _K1 * (1 - _B + _B * self.lengths[at] / self.average)
                    score += self.idf[term] * tf * (_K1 + 1) / (tf + norm)
            if score > 0:
                scored.append((-score, self.names[at]))
        return [name for _, name in sorted(scored)]


__all__ = ["MAX_QUERY", "Ranking", "words"]
