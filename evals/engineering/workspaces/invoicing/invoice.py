"""Invoices for the bookkeeping export: lines, VAT per line and totals."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")


@dataclass(frozen=True)
class InvoiceLine:
    description: str
    net: Decimal
    reduced: bool = False
    """Goods at the reduced VAT rate (food, books)."""


def line_vat(line: InvoiceLine, country: str) -> Decimal:
    if country == "NL":
        rate = Decimal("0.09") if line.reduced else Decimal("0.21")
    elif country == "DE":
        rate = Decimal("0.07") if line.reduced else Decimal("0.19")
    elif country == "BE":
        rate = Decimal("0.06") if line.reduced else Decimal("0.21")
    else:
        raise ValueError(f"no VAT rates for {country!r}")
    return (line.net * rate).quantize(CENT, rounding=ROUND_HALF_UP)


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
