"""The price-quote endpoint of the web shop: gross prices for a basket, per country."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

RATES = {
    "NL": {"standard": Decimal("0.21"), "reduced": Decimal("0.09")},
    "DE": {"standard": Decimal("0.19"), "reduced": Decimal("0.07")},
    "BE": {"standard": Decimal("0.21"), "reduced": Decimal("0.06")},
}


def quote(payload: dict[str, Any]) -> dict[str, Any]:
    """``{"country": "DE", "items": [{"sku": "x", "net": "10.00", "reduced": false}]}`` ->
    gross price per item and the basket's total, as strings."""
    country = payload.get("country")
    if country not in RATES:
        return {"error": f"no VAT rates for {country!r}"}
    items = []
    for item in payload.get("items", []):
        net = Decimal(str(item["net"]))
        rate = RATES[country]["reduced" if item.get("reduced") else "standard"]
        vat = (net * rate).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        items.append({"sku": item["sku"], "gross": str(net + vat)})
    total = sum((Decimal(item["gross"]) for item in items), Decimal("0"))
    return {"items": items, "total": str(total)}
