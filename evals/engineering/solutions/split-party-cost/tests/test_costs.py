import pytest

from costs import split_cost


def test_split_cost_evenly():
    assert split_cost(900, ["a", "b", "c"]) == [300, 300, 300]


def test_split_cost_first_guests_pay_the_odd_cents():
    assert split_cost(1001, ["a", "b", "c"]) == [334, 334, 333]


def test_split_cost_refuses_no_guests():
    with pytest.raises(ValueError):
        split_cost(100, [])
