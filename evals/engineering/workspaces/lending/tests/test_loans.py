from datetime import date

from loans import Loan, check_in, due_date, late_fee_cents
from members import sample_directory


def _loan(tier: str, due: date) -> Loan:
    return Loan("I-1", "The Long Winter", "A-1001", tier, date(2026, 3, 2), due)


def test_a_loan_is_due_after_its_period() -> None:
    assert due_date("adult", date(2026, 3, 2)) == date(2026, 3, 23)
    assert due_date("adult", date(2026, 3, 1)) == date(2026, 3, 23)  # the 22nd is a Sunday


def test_three_days_late_costs_three_days() -> None:
    loan = _loan("adult", date(2026, 3, 23))
    assert late_fee_cents(loan, date(2026, 3, 26)) == 75
    assert check_in(loan, date(2026, 3, 26)).endswith("3 day(s) late: fee 0.75")


def test_grace_days_are_free_and_the_day_after_is_not() -> None:
    loan = _loan("student", date(2026, 3, 23))
    assert late_fee_cents(loan, date(2026, 3, 25)) == 0
    assert late_fee_cents(loan, date(2026, 3, 26)) == 10


def test_a_fee_never_passes_the_cap() -> None:
    loan = _loan("adult", date(2026, 3, 1))
    assert late_fee_cents(loan, date(2026, 6, 1)) == 1000


def test_members_directory() -> None:
    directory = sample_directory()
    assert directory.get("S-2040").name == "Ben Okafor"
    assert [m.card for m in directory.children_to_move(date(2028, 5, 3))] == ["C-3007"]
