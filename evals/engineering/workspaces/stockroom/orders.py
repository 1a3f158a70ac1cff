"""Order intake: reserves stock and keeps the orders that could be served."""

from __future__ import annotations

from dataclasses import dataclass, field

from inventory import Inventory, OutOfStock


@dataclass
class Desk:
    inventory: Inventory
    accepted: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)

    def place(self, order_id: str, lines: list[tuple[str, int]]) -> bool:
        try:
            self.inventory.reserve(lines)
        except OutOfStock as exc:
            self.rejected[order_id] = str(exc)
            return False
        self.accepted[order_id] = lines
        return True

    def cancel(self, order_id: str) -> None:
        self.inventory.release(self.accepted.pop(order_id))
