from decimal import Decimal

import pytest

from invoice import InvoiceLine, invoice_totals, line_vat, render

LINES = [InvoiceLine("Desk lamp", Decimal("40.00")), InvoiceLine("Cookbook", Decimal("25.00"), True)]


@pytest.mark.parametrize(
    ("country", "vat"), [("NL", Decimal("10.65")), ("DE", Decimal("9.35")), ("BE", Decimal("9.90"))]
)
def test_totals_per_country(country, vat):
    totals = invoice_totals(LINES, country)
    assert totals == {"net": Decimal("65.00"), "vat": vat, "gross": Decimal("65.00") + vat}


def test_vat_is_rounded_half_up_to_cents():
    assert line_vat(InvoiceLine("x", Decimal("0.50")), "DE") == Decimal("0.10")


def test_unknown_country_is_refused():
    with pytest.raises(ValueError, match="FR"):
        line_vat(LINES[0], "FR")


def test_render_ends_with_totals():
    assert render("2024-001", LINES, "NL").splitlines()[-1].endswith("= 75.65")
