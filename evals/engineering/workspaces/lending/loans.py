"""Loans: checking items out and in, renewing them, and what a late return costs.

A loan is due at the end of its due day. A due day on which the library is closed moves to
the next open day. Lateness is counted in calendar days from the due day to the return day;
the tier's grace days are free, every day after them costs the tier's daily fee, and one
loan's fee never passes the tier's cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from dates import add_days, days_between, next_open_day, short_day
from members import Member
from policy import cents_text, loan_days_for, policy_for


@dataclass
class Loan:
    """One item out with one member."""

    item: str
    title: str
    card: str
    tier: str
    out: date
    due: date
    renewed: int = 0
    returned: date | None = None
    short_loan: bool = False

    @property
    def open(self) -> bool:
        return self.returned is None


class LoanRefused(Exception):
    """A checkout or renewal the rules do not allow; the message says why."""


def due_date(tier: str, out: date, short_loan: bool = False) -> date:
    """The day a loan made on ``out`` is due: the tier's loan period later, moved to the next
    day the library opens."""
    return next_open_day(add_days(out, loan_days_for(tier, short_loan)))


def checkout(member: Member, item: str, title: str, out: date, current: list[Loan],
             short_loan: bool = False) -> Loan:  # fmt: skip
    """Lend ``item`` to ``member`` on ``out``. Refused for a blocked member, one at the
    tier's limit of items, or one with an overdue loan."""
    if member.blocked:
        raise LoanRefused(f"{member.name} may not borrow: the card is blocked")
    mine = [loan for loan in current if loan.card == member.card and loan.open]
    limit = policy_for(member.tier).max_items
    if len(mine) >= limit:
        raise LoanRefused(f"{member.name} already has {len(mine)} items (the limit is {limit})")
    overdue = [loan for loan in mine if days_late(loan, out) > 0]
    if overdue:
        titles = ", ".join(loan.title for loan in overdue)
        raise LoanRefused(f"{member.name} has overdue items: {titles}")
    return Loan(item, title, member.card, member.tier, out, due_date(member.tier, out, short_loan),
                short_loan=short_loan)  # fmt: skip


def renew(loan: Loan, today: date) -> Loan:
    """Give ``loan`` another loan period from its due day. Refused when it is closed, late,
    a short loan, or out of renewals."""
    if not loan.open:
        raise LoanRefused(f"{loan.title} was returned already")
    if loan.short_loan:
        raise LoanRefused(f"{loan.title} is a short loan and cannot be renewed")
    if days_late(loan, today) > 0:
        raise LoanRefused(f"{loan.title} is overdue: return it first")
    allowed = policy_for(loan.tier).renewals
    if loan.renewed >= allowed:
        raise LoanRefused(f"{loan.title} was renewed {loan.renewed} times (the limit is {allowed})")
    loan.renewed += 1
    loan.due = due_date(loan.tier, loan.due)
    return loan


def days_late(loan: Loan, day: date) -> int:
    """Calendar days ``loan`` is (or was, once returned) past its due day on ``day``; 0 when
    it is not late."""
    until = loan.returned or day
    return max(0, days_between(loan.due, until))


def late_fee_cents(loan: Loan, day: date) -> int:
    """What the late return costs: each late day after the tier's grace days at the tier's
    daily fee, capped. A loan still out is charged as if it came back on ``day``."""
    p = policy_for(loan.tier)
    charged = days_late(loan, day) - p.grace_days
    if charged <= 0:
        return 0
    return min(charged * p.daily_fee_cents, p.fee_cap_cents)


def check_in(loan: Loan, day: date) -> str:
    """Close ``loan`` on ``day``; the receipt line, with the fee when there is one."""
    loan.returned = day
    fee = late_fee_cents(loan, day)
    line = f"{loan.title} returned {short_day(day)}"
    if fee:
        line += f", {days_late(loan, day)} day(s) late: fee {cents_text(fee)}"
    return line


def fees_owed(loans: list[Loan], card: str, day: date) -> int:
    """Everything ``card`` owes in late fees on ``day``, returned loans and open ones."""
    return sum(late_fee_cents(loan, day) for loan in loans if loan.card == card)


def overdue_report(loans: list[Loan], day: date) -> list[str]:
    """The desk's morning list: every open loan that is late, most days late first."""
    late = [loan for loan in loans if loan.open and days_late(loan, day) > 0]
    late.sort(key=lambda loan: (-days_late(loan, day), loan.card, loan.item))
    return [
        f"{loan.card} {loan.title}: {days_late(loan, day)} day(s), "
        f"{cents_text(late_fee_cents(loan, day))} so far"
        for loan in late
    ]
