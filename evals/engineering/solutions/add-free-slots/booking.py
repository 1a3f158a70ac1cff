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


def free_slots(bookings: list[Booking], day_start: int, day_end: int) -> list[tuple[int, int]]:
    """The free (start, end) gaps between ``day_start`` and ``day_end``, in time order."""
    gaps = []
    cursor = day_start
    for booking in sorted(bookings):
        if booking.start > cursor:
            gaps.append((cursor, min(booking.start, day_end)))
        cursor = max(cursor, booking.end)
        if cursor >= day_end:
            break
    if cursor < day_end:
        gaps.append((cursor, day_end))
    return [(start, end) for start, end in gaps if start < end]
