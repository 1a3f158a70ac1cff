"""The text shown on the tablet beside the meeting room door."""

from __future__ import annotations

from booking import Booking, clock


def agenda(bookings: list[Booking]) -> str:
    if not bookings:
        return "No bookings today"
    return "\n".join(f"{clock(b.start)}-{clock(b.end)}  {b.who}" for b in sorted(bookings))
