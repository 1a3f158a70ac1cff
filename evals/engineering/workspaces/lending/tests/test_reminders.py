from datetime import date

from loans import Loan
from members import Member
from reminders import late_notice, reminder

ANA = Member("A-1001", "Ana Lindqvist", "adult", "ana@example.org")


def _loan() -> Loan:
    return Loan("I-1", "The Long Winter", "A-1001", "adult", date(2026, 3, 2), date(2026, 3, 23))


def test_the_first_reminder_goes_out_three_days_before() -> None:
    text = reminder(ANA, _loan(), date(2026, 3, 20))
    assert text is not None and "is due back in 3 days, on Monday 23 March 2026" in text
    assert reminder(ANA, _loan(), date(2026, 3, 21)) is None


def test_the_last_reminder_goes_out_on_the_due_day() -> None:
    text = reminder(ANA, _loan(), date(2026, 3, 23))
    assert text is not None and "is due back today" in text


def test_a_late_notice_every_seventh_late_day() -> None:
    text = late_notice(ANA, _loan(), date(2026, 3, 30))
    assert text is not None and "is now 7 days late. The late fee so far is 1.75." in text
    assert late_notice(ANA, _loan(), date(2026, 3, 29)) is None
