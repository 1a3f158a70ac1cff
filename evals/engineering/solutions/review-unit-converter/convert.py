"""Unit conversions for the `convert` command line tool."""

from __future__ import annotations

KM_PER_MILE = 1.609344


def c_to_f(celsius: float) -> float:
    return celsius * 9 / 5 + 32


def f_to_c(fahrenheit: float) -> float:
    return (fahrenheit - 32) * 5 / 9


def km_to_miles(km: float) -> float:
    return km / KM_PER_MILE


def miles_to_km(miles: float) -> float:
    return miles * KM_PER_MILE


CONVERSIONS = {
    ("c", "f"): c_to_f,
    ("f", "c"): f_to_c,
    ("km", "mi"): km_to_miles,
    ("mi", "km"): miles_to_km,
}
"""(from unit, to unit) -> the function that converts."""

SYMBOLS = {"c": "°C", "f": "°F", "km": "km", "mi": "mi"}


def format_quantity(value: float, unit: str) -> str:
    """`21.5 °C`: the value, at most two decimals and no trailing zeros, and the unit's symbol."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    if text == "-0":
        text = "0"
    return f"{text} {SYMBOLS[unit]}"
