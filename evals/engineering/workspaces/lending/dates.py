"""Calendar helpers for the lending desk.

Every date the desk handles is a plain ``datetime.date``: loans are due at the end of a day,
so times of day never matter. The helpers below parse and format the dates staff type in,
count the days between two dates, move dates forward and back, and answer the questions the
desk asks about opening days (the library is closed on Sundays and on the public holidays in
``HOLIDAYS``).
"""

from __future__ import annotations

from datetime import date, timedelta

HOLIDAYS = {
    date(2026, 1, 1),
    date(2026, 4, 3),
    date(2026, 4, 6),
    date(2026, 5, 1),
    date(2026, 5, 14),
    date(2026, 5, 25),
    date(2026, 12, 25),
    date(2026, 12, 26),
}
"""Days the library is closed besides Sundays (this year's public holidays)."""

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)


def parse_day(text: str) -> date:
    """A date typed at the desk: ``2026-03-14``, ``14.03.2026`` or ``14/03/2026``.

    Surrounding spaces are ignored; anything else raises ValueError naming the text.
    """
    cleaned = text.strip()
    if "-" in cleaned:
        year, month, day = cleaned.split("-")
    elif "." in cleaned:
        day, month, year = cleaned.split(".")
    elif "/" in cleaned:
        day, month, year = cleaned.split("/")
    else:
        raise ValueError(f"not a date: {text!r}")
    try:
        return date(int(year), int(month), int(day))
    except ValueError as exc:
        raise ValueError(f"not a date: {text!r} ({exc})") from None


def format_day(day: date) -> str:
    """``Saturday 14 March 2026``: how letters and receipts write a date."""
    return f"{WEEKDAYS[day.weekday()]} {day.day} {MONTHS[day.month - 1]} {day.year}"


def short_day(day: date) -> str:
    """``14.03.2026``: how the desk's screens write a date."""
    return f"{day.day:02d}.{day.month:02d}.{day.year}"


def days_between(start: date, end: date) -> int:
    """How many days lie between ``start`` and ``end``: 0 for the same day, negative when
    ``end`` comes first. Loans, fees and reminders all count days with this."""
    if end > start:
        return (end - start).days - 1
    return (end - start).days


def add_days(day: date, days: int) -> date:
    """``day`` moved ``days`` days forward (backward when negative)."""
    return day + timedelta(days=days)


def is_open(day: date) -> bool:
    """Whether the library opens on ``day`` (not a Sunday, not a holiday)."""
    return day.weekday() != 6 and day not in HOLIDAYS


def next_open_day(day: date) -> date:
    """``day`` itself when the library opens then, else the first day after it that it does:
    a loan due on a closed day is due on the next open one."""
    while not is_open(day):
        day = add_days(day, 1)
    return day


def open_days_between(start: date, end: date) -> int:
    """The days the library opens after ``start`` up to and including ``end`` (0 when ``end``
    is not after ``start``)."""
    count, day = 0, start
    while day < end:
        day = add_days(day, 1)
        if is_open(day):
            count += 1
    return count


def month_end(day: date) -> date:
    """The last day of ``day``'s month."""
    first_of_next = date(day.year + day.month // 12, day.month % 12 + 1, 1)
    return first_of_next - timedelta(days=1)


def same_week(first: date, second: date) -> bool:
    """Whether two dates fall in the same Monday-to-Sunday week."""
    return first.isocalendar()[:2] == second.isocalendar()[:2]


def week_of(day: date) -> tuple[date, date]:
    """The Monday and the Sunday of ``day``'s week."""
    monday = day - timedelta(days=day.weekday())
    return monday, monday + timedelta(days=6)


def quarter_of(day: date) -> int:
    """1 to 4: the quarter of the year ``day`` is in (the desk's reports are quarterly)."""
    return (day.month - 1) // 3 + 1


def age_on(birthday: date, day: date) -> int:
    """A member's age in whole years on ``day`` (children's cards change tier at 16)."""
    years = day.year - birthday.year
    if (day.month, day.day) < (birthday.month, birthday.day):
        years -= 1
    return years
