import pytest

from venue import fits


def test_fits_counts_staff():
    assert fits(3, ["a", "b"], staff=1)
    assert not fits(3, ["a", "b"], staff=2)


def test_fits_refuses_negative_capacity():
    with pytest.raises(ValueError):
        fits(-1, [])
