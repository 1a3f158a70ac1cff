import pytest

from dashboard import summary_line
from stats import mean, median, stdev


def test_mean():
    assert mean([1, 2, 3, 6]) == 3


def test_median_odd_and_even():
    assert median([5, 1, 3]) == 3
    assert median([4, 1, 3, 2]) == 2.5


def test_stdev():
    assert stdev([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(2.138, abs=1e-3)


def test_empty_input_is_refused():
    with pytest.raises(ValueError):
        mean([])


def test_summary_line():
    assert summary_line("/login", [10, 20, 30]).endswith("mean=   20.0ms median=   20.0ms")


def test_percentile_interpolates_between_ranks():
    from stats import percentile

    assert percentile([15, 20, 35, 40, 50], 40) == pytest.approx(29.0)
    assert percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)


def test_percentile_ends_are_min_and_max():
    from stats import percentile

    assert percentile([3, 9, 1], 0) == 1
    assert percentile([3, 9, 1], 100) == 9


@pytest.mark.parametrize(("values", "p"), [([], 50), ([1], -1), ([1], 100.5)])
def test_percentile_refuses_bad_input(values, p):
    from stats import percentile

    with pytest.raises(ValueError):
        percentile(values, p)
