"""A customer's basket."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Line:
    sku: str
    price_cents: int
    quantity: int = 1
    gift_card: bool = False

    @property
    def total_cents(self) -> int:
        return self.price_cents * self.quantity


@dataclass
class Cart:
    lines: list[Line] = field(default_factory=list)

    @property
    def subtotal_cents(self) -> int:
        return sum(line.total_cents for line in self.lines)
