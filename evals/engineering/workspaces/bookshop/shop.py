"""The bookshop's back office: the catalog, orders, prices with coupons, and receipts."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

# --- data ----------------------------------------------------------------------------------


@dataclass
class Book:
    isbn: str
    title: str
    price_cents: int
    stock: int = 0


@dataclass
class Order:
    customer: str
    lines: list[tuple[Book, int]] = field(default_factory=list)
    coupon: str | None = None

    def add(self, book: Book, quantity: int = 1) -> None:
        if quantity > book.stock:
            raise ValueError(f"only {book.stock} of {book.title!r} in stock")
        self.lines.append((book, quantity))


# --- storage -------------------------------------------------------------------------------


def load_catalog(path: str | Path) -> dict[str, Book]:
    """The books of a catalog file, by ISBN."""
    records = json.loads(Path(path).read_text(encoding="utf-8"))
    return {record["isbn"]: Book(**record) for record in records}


def save_catalog(books: dict[str, Book], path: str | Path) -> None:
    records = [asdict(book) for book in sorted(books.values(), key=lambda b: b.isbn)]
    Path(path).write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")


# --- pricing -------------------------------------------------------------------------------

COUPONS = {"READ10": 10, "SPRING25": 25}
"""Coupon code -> percent off the books (not the shipping)."""
SHIPPING_CENTS = 395
FREE_SHIPPING_FROM_CENTS = 4000


def subtotal_cents(order: Order) -> int:
    return sum(book.price_cents * quantity for book, quantity in order.lines)


def discount_cents(order: Order) -> int:
    if order.coupon is None:
        return 0
    if order.coupon not in COUPONS:
        raise ValueError(f"unknown coupon {order.coupon!r}")
    return subtotal_cents(order) * COUPONS[order.coupon] // 100


def order_total(order: Order) -> int:
    books = subtotal_cents(order) - discount_cents(order)
    shipping = 0 if books >= FREE_SHIPPING_FROM_CENTS else SHIPPING_CENTS
    return books + shipping


# --- receipts ------------------------------------------------------------------------------


def money(cents: int) -> str:
    return f"EUR {cents // 100}.{cents % 100:02d}"


def receipt(order: Order) -> str:
    lines = [f"Receipt for {order.customer}"]
    for book, quantity in order.lines:
        lines.append(f"{quantity} x {book.title:<24} {money(book.price_cents * quantity):>12}")
    if order.coupon:
        lines.append(f"coupon {order.coupon:<22} {'-' + money(discount_cents(order)):>13}")
    lines.append(f"{'total':<28} {money(order_total(order)):>12}")
    return "\n".join(lines)
