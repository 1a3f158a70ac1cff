"""How one value is written in a report cell."""

from __future__ import annotations


def format_cell(value: str) -> str:
    """Numbers with a decimal point get two decimals and thousands separators; whole numbers
    get separators only; text stays as it is."""
    try:
        number = float(value)
    except ValueError:
        return value
    if "." not in value:
        return f"{int(number):,}"
    return f"{number:,.2f}"
