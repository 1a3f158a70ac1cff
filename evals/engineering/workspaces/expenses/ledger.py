"""Expenses loaded from the bank's semicolon-separated export."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path

from parsing import parse_amount, parse_date


@dataclass(frozen=True)
class Expense:
    day: date
    category: str
    description: str
    amount: Decimal


def load(path: str | Path) -> list[Expense]:
    with open(path, newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file, delimiter=";"))
    return [
        Expense(parse_date(r["date"]), r["category"], r["description"], parse_amount(r["amount"]))
        for r in rows
    ]
