"""Library members: who they are, which tier they belong to, and what the desk keeps about
them. Cards carry a number; the desk looks members up by it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from dates import age_on
from policy import POLICIES


@dataclass
class Member:
    """A card holder. ``tier`` names a lending policy (see policy.py); ``blocked`` members
    may return items but not borrow."""

    card: str
    name: str
    tier: str
    email: str
    born: date | None = None
    blocked: bool = False
    notes: list[str] = field(default_factory=list)

    def greeting(self) -> str:
        """How letters to the member begin."""
        first = self.name.split()[0] if self.name.strip() else "reader"
        return f"Dear {first},"


class Directory:
    """All members by card number."""

    def __init__(self) -> None:
        self._members: dict[str, Member] = {}

    def add(self, member: Member) -> Member:
        """Register ``member``; ValueError for a card already in use or an unknown tier."""
        if member.card in self._members:
            raise ValueError(f"card {member.card} is already in use")
        if member.tier not in POLICIES:
            raise ValueError(f"unknown tier {member.tier!r} for card {member.card}")
        self._members[member.card] = member
        return member

    def get(self, card: str) -> Member:
        """The member with ``card``; KeyError when there is none."""
        try:
            return self._members[card.strip()]
        except KeyError:
            raise KeyError(f"no member with card {card!r}") from None

    def find(self, text: str) -> list[Member]:
        """Members whose name contains ``text`` (any case), by name."""
        wanted = text.casefold()
        found = [m for m in self._members.values() if wanted in m.name.casefold()]
        return sorted(found, key=lambda m: m.name)

    def block(self, card: str, why: str) -> None:
        """Stop a member borrowing, noting why."""
        member = self.get(card)
        member.blocked = True
        member.notes.append(f"blocked: {why}")

    def unblock(self, card: str) -> None:
        member = self.get(card)
        member.blocked = False
        member.notes.append("unblocked")

    def retier(self, card: str, tier: str) -> None:
        """Move a member to another tier (a child turning 16, a student graduating)."""
        if tier not in POLICIES:
            raise ValueError(f"unknown tier {tier!r}")
        member = self.get(card)
        member.notes.append(f"tier {member.tier} -> {tier}")
        member.tier = tier

    def children_to_move(self, today: date) -> list[Member]:
        """Child members who are 16 or older on ``today``: their cards become adult ones."""
        return [
            m for m in self._members.values()
            if m.tier == "child" and m.born is not None and age_on(m.born, today) >= 16
        ]

    def __len__(self) -> int:
        return len(self._members)


def sample_directory() -> Directory:
    """The members the desk's training screens use."""
    directory = Directory()
    directory.add(Member("A-1001", "Ana Lindqvist", "adult", "ana@example.org"))
    directory.add(Member("S-2040", "Ben Okafor", "student", "ben@example.org"))
    directory.add(Member("C-3007", "Chen Wei", "child", "chen.family@example.org",
                         born=date(2012, 5, 3)))
    directory.add(Member("R-4100", "Dora Haas", "senior", "dora@example.org"))
    directory.add(Member("T-0001", "Eli Moreau", "staff", "eli@library.example.org"))
    return directory
