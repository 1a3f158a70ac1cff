"""What an order costs: books, coupons and shipping."""

from __future__ import annotations

from models import Order

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
