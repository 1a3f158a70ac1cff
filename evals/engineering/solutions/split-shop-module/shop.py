"""The bookshop's back office: receipts, and the names of models, storage and pricing that
code elsewhere imports from here."""

from __future__ import annotations

from models import Book, Order
from pricing import (
    COUPONS,
    FREE_SHIPPING_FROM_CENTS,
    SHIPPING_CENTS,
    discount_cents,
    order_total,
    subtotal_cents,
)
from storage import load_catalog, save_catalog

__all__ = [
    "COUPONS",
    "FREE_SHIPPING_FROM_CENTS",
    "SHIPPING_CENTS",
    "Book",
    "Order",
    "discount_cents",
    "load_catalog",
    "money",
    "order_total",
    "receipt",
    "save_catalog",
    "subtotal_cents",
]


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
