"""The price-quote endpoint of the web shop: gross prices for a basket, per country."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from vat import VAT_RATES, vat_amount


def quote(payload: dict[str, Any]) -> dict[str, Any]:
    """``{"country": "DE", "items": [{"sku": "x", "net": "10.00", "reduced": false}]}`` ->
    gross price per item and the basket's total, as strings."""
    country = payload.get("country")
    if country not in VAT_RATES:
        return {"error": f"no VAT rates for {country!r}"}
    items = []
    for item in payload.get("items", []):
        net = Decimal(str(item["net"]))
        vat = vat_amount(net, country, bool(item.get("reduced")))
        items.append({"sku": item["sku"], "gross": str(net + vat)})
    total = sum((Decimal(item["gross"]) for item in items), Decimal("0"))
    return {"items": items, "total": str(total)}
