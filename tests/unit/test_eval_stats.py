"""The eval's statistics against published and hand-computed values.

Wilson intervals: Newcombe (1998), "Two-sided confidence intervals for the single proportion",
table I, method 3 (score, no continuity correction). Differences: Newcombe (1998), "Interval
estimation for the difference between independent proportions", table II, method 10.
"""

from __future__ import annotations

import pytest

from fabric.application.evals.stats import newcombe, pass_at_k, wilson, within_noise


@pytest.mark.parametrize(
    ("passed", "attempts", "low", "high"),
    [
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_matches_newcombes_table(
    passed: int, attempts: int, low: float, high: float
) -> None:
    got = wilson(passed, attempts)
    assert got == pytest.approx((low, high), abs=5e-5)


def test_wilson_by_hand_and_at_the_edges() -> None:
    # 2 of 2: centre (1 + z²/4) / (1 + z²/2), half z·sqrt(z²/16) / (1 + z²/2), z = 1.96
    z2 = 1.959963984540054**2
    centre, half = (1 + z2 / 4) / (1 + z2 / 2), (z2 / 4) / (1 + z2 / 2)
    assert wilson(2, 2) == pytest.approx((centre - half, 1.0))
    assert wilson(2, 2)[0] == pytest.approx(0.3424, abs=5e-5)
    assert wilson(0, 0) == (0.0, 1.0)  # nothing known
    with pytest.raises(ValueError, match="out of range"):
        wilson(3, 2)


@pytest.mark.parametrize(
    ("passed", "attempts", "k", "expected"),
    [
        (1, 3, 1, 1 / 3),  # 1 - C(2,1)/C(3,1)
        (1, 3, 2, 2 / 3),  # 1 - C(2,2)/C(3,2) = 1 - 1/3
        (1, 3, 3, 1.0),
        (2, 5, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (0, 4, 2, 0.0),
        (4, 4, 1, 1.0),
    ],
)
def test_pass_at_k_is_the_unbiased_estimator(
    passed: int, attempts: int, k: int, expected: float
) -> None:
    assert pass_at_k(passed, attempts, k) == pytest.approx(expected)


def test_pass_at_k_needs_k_within_the_attempts() -> None:
    with pytest.raises(ValueError, match="between 1 and the number of attempts"):
        pass_at_k(1, 3, 4)


@pytest.mark.parametrize(
    ("a", "b", "diff", "low", "high"),
    [
        ((48, 80), (56, 70), 0.2, 0.0524, 0.3339),  # Newcombe's example (a), B - A
        ((3, 10), (9, 10), 0.6, 0.1705, 0.8090),  # example (b)
        ((0, 10), (0, 20), 0.0, -0.2775, 0.1611),  # example (h): both zero
    ],
)
def test_newcombe_matches_the_published_intervals(
    a: tuple[int, int], b: tuple[int, int], diff: float, low: float, high: float
) -> None:
    got = newcombe(*a, *b)
    assert got == pytest.approx((diff, low, high), abs=5e-5)


def test_within_noise_means_the_interval_holds_zero() -> None:
    assert within_noise(*newcombe(0, 10, 0, 20)[1:])
    assert not within_noise(*newcombe(48, 80, 56, 70)[1:])
    # 2 of 2 against 0 of 2 is already beyond the noise; 1 of 2 against 0 of 2 is not
    assert not within_noise(*newcombe(2, 2, 0, 2)[1:])
    assert within_noise(*newcombe(1, 2, 0, 2)[1:])
