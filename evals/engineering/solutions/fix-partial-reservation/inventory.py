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
        wanted: dict[str, int] = {}
        for sku, quantity in lines:
            if quantity <= 0:
                raise ValueError(f"{sku}: quantity must be positive")
            wanted[sku] = wanted.get(sku, 0) + quantity
        for sku, quantity in wanted.items():
            if quantity > self.available(sku):
                raise OutOfStock(sku, quantity, self.available(sku))
        for sku, quantity in wanted.items():
            self.stock[sku] -= quantity

    def release(self, lines: OrderLines) -> None:
        """Puts a cancelled order's items back."""
        for sku, quantity in lines:
            self.receive(sku, quantity)
