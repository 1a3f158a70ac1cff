import pytest

from guests import dietary_counts, seats_needed


def test_seats_needed_rounds_up():
    assert seats_needed(["a", "b", "c"], 2) == 2


def test_seats_needed_for_nobody():
    assert seats_needed([], 8) == 0


def test_seats_needed_refuses_empty_tables():
    with pytest.raises(ValueError):
        seats_needed(["a"], 0)


def test_dietary_counts_groups_guests():
    assert dietary_counts({"ann": "vegan", "bob": "", "cy": "vegan"}) == {"vegan": 2, "any": 1}
