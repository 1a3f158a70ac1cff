"""Bookings of one meeting room. Times are minutes since midnight: 9:30 is 570."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Booking:
    start: int
    end: int
    who: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end <= 24 * 60:
            raise ValueError(f"a booking runs forwards within one day: {self.start}-{self.end}")


def overlaps(a: Booking, b: Booking) -> bool:
    """Whether two bookings share at least one minute (touching ones do not)."""
    return a.start < b.end and b.start < a.end


def can_book(existing: list[Booking], wanted: Booking) -> bool:
    return not any(overlaps(wanted, other) for other in existing)


def clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"
