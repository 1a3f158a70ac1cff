"""`python report.py march.csv`: totals per category and for the month."""

from __future__ import annotations

import sys
from collections import defaultdict
from decimal import Decimal

from ledger import Expense, load


def totals(expenses: list[Expense]) -> dict[str, Decimal]:
    sums: dict[str, Decimal] = defaultdict(Decimal)
    for expense in expenses:
        sums[expense.category] += expense.amount
    return dict(sorted(sums.items()))


def render(expenses: list[Expense]) -> str:
    sums = totals(expenses)
    lines = [f"{category:<12} {amount:>10,.2f}" for category, amount in sums.items()]
    lines.append(f"{'total':<12} {sum(sums.values(), Decimal(0)):>10,.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(load(sys.argv[1])))
