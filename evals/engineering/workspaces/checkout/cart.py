"""The shopping cart: lines of (product, unit price, quantity) and the amounts to pay."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from shipping import shipping_cost


@dataclass
class Line:
    product: str
    unit_price: Decimal
    quantity: int = 1

    @property
    def amount(self) -> Decimal:
        return self.unit_price * self.quantity


@dataclass
class Cart:
    lines: list[Line] = field(default_factory=list)
    express: bool = False

    def add(self, product: str, unit_price: str, quantity: int = 1) -> None:
        if quantity < 1:
            raise ValueError("quantity must be at least 1")
        self.lines.append(Line(product, Decimal(unit_price), quantity))

    @property
    def subtotal(self) -> Decimal:
        return sum((line.amount for line in self.lines), Decimal("0.00"))

    @property
    def shipping(self) -> Decimal:
        return shipping_cost(self.subtotal, self.express)

    @property
    def total(self) -> Decimal:
        return self.subtotal + self.shipping
