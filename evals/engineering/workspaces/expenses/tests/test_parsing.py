from datetime import date
from decimal import Decimal

from parsing import parse_amount, parse_date


def test_day_first_dates():
    assert parse_date("02/03/2024") == date(2024, 3, 2)


def test_amount_with_point_or_comma():
    assert parse_amount("42.35") == Decimal("42.35")
    assert parse_amount("6,80") == Decimal("6.80")


def test_amount_with_currency_sign():
    assert parse_amount("€ 12") == Decimal("12")


def test_cancelled_payment_counts_as_zero():
    assert parse_amount("-") == Decimal("0")
