"""Imports the bank's CSV export (date, payee, amount) into ledger transactions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation

from csvline import split_fields

HEADER = ["date", "payee", "amount"]


class ImportError_(ValueError):
    """A line of the export could not be read; the message names the line."""


@dataclass(frozen=True)
class Transaction:
    day: date
    payee: str
    amount: Decimal


def import_rows(text: str) -> list[Transaction]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or split_fields(lines[0]) != HEADER:
        raise ImportError_(f"line 1: expected the header {','.join(HEADER)}")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        fields = split_fields(line)
        if len(fields) != len(HEADER):
            raise ImportError_(f"line {number}: expected 3 fields, found {len(fields)}")
        day, payee, amount = fields
        try:
            rows.append(Transaction(date.fromisoformat(day), payee, Decimal(amount)))
        except (ValueError, InvalidOperation) as exc:
            raise ImportError_(f"line {number}: {exc}") from None
    return rows


def balance(rows: list[Transaction]) -> Decimal:
    return sum((row.amount for row in rows), Decimal("0"))
