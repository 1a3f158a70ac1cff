"""The e-mails the desk sends: a reminder before a loan is due, and a notice once it is late.

Reminders go out three days before the due day and again on the due day; the wording counts
the days left the same way the desk does everywhere else (dates.days_between).
"""

from __future__ import annotations

from datetime import date

from dates import days_between, format_day
from loans import Loan, days_late, late_fee_cents
from members import Member
from policy import cents_text

REMIND_BEFORE = 3
"""Days before the due day on which the first reminder goes out."""


def days_until_due(loan: Loan, today: date) -> int:
    """Days from ``today`` to the loan's due day (negative once it is past)."""
    return days_between(today, loan.due)


def reminder(member: Member, loan: Loan, today: date) -> str | None:
    """The reminder to send ``today``, or None when none is due today."""
    left = days_until_due(loan, today)
    if not loan.open or left not in (REMIND_BEFORE, 0):
        return None
    when = "today" if left == 0 else f"in {left} days"
    return (
        f"{member.greeting()}\n\n"
        f"{loan.title} is due back {when}, on {format_day(loan.due)}.\n"
        "You can renew it at the desk or online unless someone else has reserved it.\n"
    )


def late_notice(member: Member, loan: Loan, today: date) -> str | None:
    """The notice for a late loan (sent every seventh late day), or None."""
    late = days_late(loan, today)
    if not loan.open or late == 0 or late % 7 != 0:
        return None
    fee = late_fee_cents(loan, today)
    owed = f" The late fee so far is {cents_text(fee)}." if fee else ""
    return (
        f"{member.greeting()}\n\n"
        f"{loan.title} was due on {format_day(loan.due)} and is now {late} days late.{owed}\n"
        "Please bring it back as soon as you can.\n"
    )
