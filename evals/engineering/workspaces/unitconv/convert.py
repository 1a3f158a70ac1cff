"""Unit conversions for the `convert` command line tool."""

from __future__ import annotations

KM_PER_MILE = 1.609344


def c_to_f(celsius: float) -> float:
    return celsius * 9 / 5 + 32


def f_to_c(fahrenheit: float) -> float:
    return (fahrenheit - 32) * 5 / 9


def km_to_miles(km: float) -> float:
    return km / KM_PER_MILE


CONVERSIONS = {
    ("c", "f"): c_to_f,
    ("f", "c"): f_to_c,
    ("km", "mi"): km_to_miles,
}
"""(from unit, to unit) -> the function that converts."""

SYMBOLS = {"c": "°C", "f": "°F", "km": "km", "mi": "mi"}


def format_quantity(value: float, unit: str) -> str:
    """`21.5 °C`: the value and the unit's symbol."""
    return f"{value:f} {SYMBOLS[unit]}"
