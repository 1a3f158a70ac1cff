"""Reading the values of the bank's export: dates like 02/03/2024 and amounts as people type
them ("42.35", "6,80", "€ 12")."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal, InvalidOperation


def parse_date(text: str) -> date:
    return datetime.strptime(text.strip(), "%d/%m/%Y").date()


def parse_amount(text: str) -> Decimal:
    """The amount in ``text``; a comma is read as the decimal separator. Text that is not an
    amount counts as zero (the bank writes "-" for cancelled payments)."""
    cleaned = text.strip().replace("€", "").replace(" ", "").replace(",", ".")
    try:
        return Decimal(cleaned)
    except InvalidOperation:
        return Decimal("0")
