"""The statistics of an eval, as pure functions: how sure a pass rate is, and whether two
differ by more than chance.

- ``wilson``: the Wilson score interval for a proportion (good at small n and near 0 or 1,
  where the textbook normal interval says impossible things such as [-0.1, 0.3]).
- ``pass_at_k``: the chance that at least one of k attempts passes, estimated without bias
  from n attempts of which c passed: 1 - C(n-c, k) / C(n, k).
- ``newcombe``: Newcombe's hybrid score interval for the difference of two proportions
  (method 10 of his 1998 paper), built from the two Wilson intervals.
"""

from __future__ import annotations

import math

Z95 = 1.959963984540054
"""The two-sided 95% quantile of the standard normal distribution."""


def wilson(passed: int, attempts: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``passed`` out of ``attempts`` (0 attempts: (0, 1), which
    says nothing is known)."""
    _check_counts(passed, attempts)
    if attempts == 0:
        return 0.0, 1.0
    p = passed / attempts
    z2 = z * z
    scale = 1 + z2 / attempts
    centre = (p + z2 / (2 * attempts)) / scale
    half = z * math.sqrt(p * (1 - p) / attempts + z2 / (4 * attempts * attempts)) / scale
    return max(0.0, centre - half), min(1.0, centre + half)


def pass_at_k(passed: int, attempts: int, k: int) -> float:
    """The unbiased estimate of the chance that at least one of ``k`` attempts passes."""
    _check_counts(passed, attempts)
    if not 1 <= k <= attempts:
        raise ValueError(f"k must be between 1 and the number of attempts ({attempts}), not {k}")
    if attempts - passed < k:
        return 1.0
    return 1.0 - math.comb(attempts - passed, k) / math.comb(attempts, k)


def newcombe(
    passed_a: int, attempts_a: int, passed_b: int, attempts_b: int, z: float = Z95
) -> tuple[float, float, float]:
    """The difference ``p_b - p_a`` and its hybrid score interval, as (difference, low, high).
    The difference is larger than the noise when the interval leaves out 0."""
    low_a, high_a = wilson(passed_a, attempts_a, z)
    low_b, high_b = wilson(passed_b, attempts_b, z)
    p_a = passed_a / attempts_a if attempts_a else 0.0
    p_b = passed_b / attempts_b if attempts_b else 0.0
    diff = p_b - p_a
    low = diff - math.sqrt((p_b - low_b) ** 2 + (high_a - p_a) ** 2)
    high = diff + math.sqrt((high_b - p_b) ** 2 + (p_a - low_a) ** 2)
    return diff, max(-1.0, low), min(1.0, high)


def within_noise(low: float, high: float) -> bool:
    """Whether an interval for a difference includes 0 (so chance may explain it)."""
    return low <= 0.0 <= high


def _check_counts(passed: int, attempts: int) -> None:
    if attempts < 0 or not 0 <= passed <= attempts:
        raise ValueError(f"counts out of range: {passed} passed of {attempts}")
