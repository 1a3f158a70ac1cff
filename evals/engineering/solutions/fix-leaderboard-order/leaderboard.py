"""The pub quiz leaderboard: totals per team over the rounds, best team first."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    team: str
    score: int


def totals(rounds: list[dict[str, int]]) -> list[Entry]:
    """One entry per team with the sum of its points over all rounds."""
    sums: dict[str, int] = defaultdict(int)
    for points in rounds:
        for team, score in points.items():
            sums[team] += score
    return [Entry(team, score) for team, score in sums.items()]


def ranking(entries: list[Entry]) -> list[Entry]:
    """Highest score first; teams with equal scores in alphabetical order."""
    return sorted(entries, key=lambda e: (-e.score, e.team))


def render(entries: list[Entry]) -> str:
    lines = []
    for place, entry in enumerate(ranking(entries), start=1):
        lines.append(f"{place:>2}. {entry.team:<20} {entry.score:>3}")
    return "\n".join(lines)
