"""Lending rules by membership tier.

Each tier has its own loan period, number of renewals, grace period and late fee. The desk
never hard-codes a rule: everything asks ``policy_for(member)`` and reads the fields of the
``LoanPolicy`` it gets. Fees are in cents throughout, so that sums never pick up floating
point noise; ``cents_text`` turns them into what a receipt prints.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoanPolicy:
    """What a tier may borrow and what it pays when late.

    loan_days: days from checkout to the due date.
    renewals: how many times a loan may be renewed, each time for ``loan_days`` more.
    grace_days: days after the due date that cost nothing (a return on the last grace day is
        still free; the first day after it is charged as every late day before it).
    daily_fee_cents: what one late day costs.
    fee_cap_cents: the most one loan's late fee can reach.
    max_items: how many items a member of the tier may have out at once.
    """

    tier: str
    loan_days: int
    renewals: int
    grace_days: int
    daily_fee_cents: int
    fee_cap_cents: int
    max_items: int


POLICIES = {
    "adult": LoanPolicy("adult", loan_days=21, renewals=2, grace_days=0,
                        daily_fee_cents=25, fee_cap_cents=1000, max_items=12),
    "student": LoanPolicy("student", loan_days=28, renewals=3, grace_days=2,
                          daily_fee_cents=10, fee_cap_cents=500, max_items=15),
    "child": LoanPolicy("child", loan_days=21, renewals=2, grace_days=7,
                        daily_fee_cents=0, fee_cap_cents=0, max_items=8),
    "senior": LoanPolicy("senior", loan_days=28, renewals=3, grace_days=3,
                         daily_fee_cents=10, fee_cap_cents=400, max_items=12),
    "staff": LoanPolicy("staff", loan_days=42, renewals=5, grace_days=0,
                        daily_fee_cents=0, fee_cap_cents=0, max_items=30),
}
"""Every tier the desk knows; a member of another tier is refused at checkout."""

SHORT_LOAN_TIERS = {"adult", "student"}
"""Tiers whose loans of items marked short-loan (new releases) last 7 days."""


def policy_for(tier: str) -> LoanPolicy:
    """The policy of ``tier``; KeyError naming the known tiers when there is none."""
    try:
        return POLICIES[tier]
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise KeyError(f"no lending policy for tier {tier!r} (known: {known})") from None


def loan_days_for(tier: str, short_loan: bool) -> int:
    """How long a loan of an item lasts for a member of ``tier``."""
    if short_loan and tier in SHORT_LOAN_TIERS:
        return 7
    return policy_for(tier).loan_days


def cents_text(cents: int) -> str:
    """``12.50``: cents as a receipt prints them (no currency sign; the receipt adds it)."""
    sign = "-" if cents < 0 else ""
    whole, part = divmod(abs(cents), 100)
    return f"{sign}{whole}.{part:02d}"


def describe(tier: str) -> str:
    """One line for the desk's help screen."""
    p = policy_for(tier)
    fee = (
        "no late fees"
        if p.daily_fee_cents == 0
        else f"{cents_text(p.daily_fee_cents)} a late day, at most {cents_text(p.fee_cap_cents)}"
    )
    grace = f", {p.grace_days} day(s) of grace" if p.grace_days else ""
    return (
        f"{tier}: {p.loan_days} days, {p.renewals} renewal(s), up to {p.max_items} items"
        f"{grace}, {fee}"
    )


def all_descriptions() -> list[str]:
    """The help screen: every tier, in a fixed order."""
    return [describe(tier) for tier in ("adult", "student", "senior", "child", "staff")]
