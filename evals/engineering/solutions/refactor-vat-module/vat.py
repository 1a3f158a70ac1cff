"""VAT rates per country and the VAT of an amount: the one place that knows them."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")

VAT_RATES: dict[str, dict[str, Decimal]] = {
    "NL": {"standard": Decimal("0.21"), "reduced": Decimal("0.09")},
    "DE": {"standard": Decimal("0.19"), "reduced": Decimal("0.07")},
    "BE": {"standard": Decimal("0.21"), "reduced": Decimal("0.06")},
}


def vat_amount(net: Decimal, country: str, reduced: bool = False) -> Decimal:
    """The VAT on ``net`` in ``country``, rounded half up to cents."""
    try:
        rates = VAT_RATES[country]
    except KeyError:
        raise ValueError(f"no VAT rates for {country!r}") from None
    rate = rates["reduced" if reduced else "standard"]
    return (net * rate).quantize(CENT, rounding=ROUND_HALF_UP)
