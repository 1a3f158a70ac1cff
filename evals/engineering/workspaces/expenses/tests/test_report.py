from decimal import Decimal

from ledger import load
from report import render, totals


def test_small_expenses_per_category():
    sums = totals(load("march.csv"))
    assert sums["food"] == Decimal("107.25")
    assert sums["transport"] == Decimal("49.00")


def test_march_total_matches_the_bank_statement():
    assert render(load("march.csv")).splitlines()[-1] == "total          2,570.75"


def test_housing_includes_rent_and_energy():
    assert totals(load("march.csv"))["housing"] == Decimal("2414.50")
