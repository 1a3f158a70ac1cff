"""Splits one line of the bank's CSV export into its fields."""

from __future__ import annotations


def split_fields(line: str, delimiter: str = ",") -> list[str]:
    """The fields of ``line``, with surrounding whitespace and line endings removed."""
    return [field.strip() for field in line.rstrip("\r\n").split(delimiter)]
