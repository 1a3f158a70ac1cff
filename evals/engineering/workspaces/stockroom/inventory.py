"""Stock levels of the warehouse and reservations for incoming orders."""

from __future__ import annotations

from collections.abc import Iterable

OrderLines = Iterable[tuple[str, int]]
"""(sku, quantity) pairs; a sku may appear on more than one line."""


class OutOfStock(Exception):
    def __init__(self, sku: str, wanted: int, available: int) -> None:
        super().__init__(f"{sku}: {wanted} wanted, {available} available")
        self.sku, self.wanted, self.available = sku, wanted, available


class Inventory:
    def __init__(self, stock: dict[str, int] | None = None) -> None:
        self.stock: dict[str, int] = dict(stock or {})

    def receive(self, sku: str, quantity: int) -> None:
        if quantity <= 0:
            raise ValueError("received quantity must be positive")
        self.stock[sku] = self.stock.get(sku, 0) + quantity

    def available(self, sku: str) -> int:
        return self.stock.get(sku, 0)

    def reserve(self, lines: OrderLines) -> None:
        """Takes every line of an order from stock, or none of them (OutOfStock)."""
        for sku, quantity in lines:
            if quantity <= 0:
                raise ValueError(f"{sku}: quantity must be positive")
            have = self.available(sku)
            if quantity > have:
                raise OutOfStock(sku, quantity, have)
            self.stock[sku] = have - quantity

    def release(self, lines: OrderLines) -> None:
        """Puts a cancelled order's items back."""
        for sku, quantity in lines:
            self.receive(sku, quantity)
