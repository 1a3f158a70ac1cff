"""The text printed on a parcel's label."""

from __future__ import annotations

from models import Parcel
from rules import accepts, requires_signature
from tariffs import price_cents


def label(parcel: Parcel) -> str:
    if not accepts(parcel):
        raise ValueError(f"{parcel.reference}: the carrier does not accept this parcel")
    signature = requires_signature(parcel)
    lines = [parcel.reference, f"to {parcel.country}", f"{parcel.weight_grams / 1000:.1f} kg"]
    if signature:
        lines.append("SIGNATURE REQUIRED")
    if parcel.fragile:
        lines.append("FRAGILE")
    cents = price_cents(parcel, signature)
    lines.append(f"postage EUR {cents // 100}.{cents % 100:02d}")
    return "\n".join(lines)
