"""Invoices for the bookkeeping export: lines, VAT per line and totals."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from vat import vat_amount


@dataclass(frozen=True)
class InvoiceLine:
    description: str
    net: Decimal
    reduced: bool = False
    """Goods at the reduced VAT rate (food, books)."""


def line_vat(line: InvoiceLine, country: str) -> Decimal:
    return vat_amount(line.net, country, line.reduced)


def invoice_totals(lines: list[InvoiceLine], country: str) -> dict[str, Decimal]:
    net = sum((line.net for line in lines), Decimal("0"))
    vat = sum((line_vat(line, country) for line in lines), Decimal("0"))
    return {"net": net, "vat": vat, "gross": net + vat}


def render(number: str, lines: list[InvoiceLine], country: str) -> str:
    out = [f"Invoice {number}"]
    for line in lines:
        out.append(f"{line.description:<30} {line.net:>10} VAT {line_vat(line, country):>8}")
    totals = invoice_totals(lines, country)
    out.append(f"{'Total':<30} {totals['net']:>10} VAT {totals['vat']:>8} = {totals['gross']}")
    return "\n".join(out)
