import pytest

from cart import Cart, Line
from discounts import UnknownCode, discount_cents


def test_welcome_takes_five_percent() -> None:
    cart = Cart([Line("book", 2000), Line("pen", 350, quantity=2)])
    assert discount_cents(cart, "WELCOME5") == 135


def test_codes_ignore_case_and_spaces() -> None:
    assert discount_cents(Cart([Line("book", 2000)]), " welcome5 ") == 100


def test_an_unknown_code_is_refused() -> None:
    with pytest.raises(UnknownCode):
        discount_cents(Cart([Line("book", 2000)]), "FREEBIE")
