import pytest

from freight import quote


def test_germany():
    assert quote("DE", 100) == 45.36


def test_sweden():
    assert quote("SE", 10) == 6.38


def test_a_country_we_do_not_ship_to():
    with pytest.raises(ValueError):
        quote("FR", 1)


def test_norway_pays_the_current_fuel_surcharge():
    assert quote("NO", 100) == 70.5
