from decimal import Decimal

import pytest

from cart import Cart


def test_small_basket_pays_flat_rate():
    cart = Cart()
    cart.add("mug", "12.50", 2)
    assert cart.total == Decimal("29.95")


def test_basket_over_threshold_ships_free():
    cart = Cart()
    cart.add("kettle", "64.00")
    assert cart.shipping == Decimal("0.00")


def test_basket_of_exactly_fifty_ships_free():
    cart = Cart()
    cart.add("tea", "12.50", 4)
    assert cart.subtotal == Decimal("50.00")
    assert cart.total == Decimal("50.00")


def test_express_always_costs_extra():
    cart = Cart(express=True)
    cart.add("kettle", "64.00")
    assert cart.shipping == Decimal("12.00")


def test_zero_quantity_is_refused():
    with pytest.raises(ValueError):
        Cart().add("mug", "12.50", 0)
