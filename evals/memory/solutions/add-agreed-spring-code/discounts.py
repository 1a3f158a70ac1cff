"""Discount codes a customer can enter at checkout."""

from __future__ import annotations

from dataclasses import dataclass

from cart import Cart
from money import percent_of


class UnknownCode(ValueError):
    """The code is not one of ours (or not any more)."""


@dataclass(frozen=True)
class Rule:
    percent: int
    minimum_cents: int = 0
    """The goods must come to at least this much for the code to apply."""
    excludes_gift_cards: bool = False
    """Gift cards count neither towards the minimum nor for the discount."""


RULES = {
    "WELCOME5": Rule(percent=5),
    "SPRING24": Rule(percent=15, minimum_cents=4000, excludes_gift_cards=True),
}


def discount_cents(cart: Cart, code: str) -> int:
    """How much ``code`` takes off ``cart``, in cents (0 when the basket does not qualify)."""
    rule = RULES.get(code.strip().upper())
    if rule is None:
        raise UnknownCode(code)
    goods = sum(
        line.total_cents
        for line in cart.lines
        if not (rule.excludes_gift_cards and line.gift_card)
    )
    if goods < rule.minimum_cents:
        return 0
    return percent_of(goods, rule.percent)
