"""Shipping charges for the web shop (prices in euros)."""

from __future__ import annotations

from decimal import Decimal

FREE_SHIPPING_FROM = Decimal("50.00")
"""Baskets of this subtotal or more ship for free (standard delivery only)."""
FLAT_RATE = Decimal("4.95")
EXPRESS_RATE = Decimal("12.00")


def shipping_cost(subtotal: Decimal, express: bool = False) -> Decimal:
    if express:
        return EXPRESS_RATE
    if subtotal > FREE_SHIPPING_FROM:
        return Decimal("0.00")
    return FLAT_RATE
