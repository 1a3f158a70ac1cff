"""Phone numbers as typed by people, turned into E.164-like strings for the SMS gateway."""

from __future__ import annotations

COUNTRY_CODES = {"GB": "44", "DE": "49", "NL": "31", "FR": "33", "US": "1"}


def normalize_phone(raw: str, country: str = "GB") -> str:
    """``raw`` as ``+<country code><number>``; numbers without an international prefix are
    taken to be from ``country``, and their leading trunk zero is dropped."""
    text = raw.strip()
    digits = "".join(ch for ch in text if ch.isdigit())
    if not digits:
        raise ValueError(f"no digits in {raw!r}")
    if text.startswith("+"):
        return "+" + digits
    if digits.startswith("00"):
        return "+" + digits[2:]
    try:
        code = COUNTRY_CODES[country]
    except KeyError:
        raise ValueError(f"unknown country {country!r}") from None
    if digits.startswith("0"):
        digits = digits[1:]
    return f"+{code}{digits}"


def same_number(a: str, b: str, country: str = "GB") -> bool:
    return normalize_phone(a, country) == normalize_phone(b, country)
