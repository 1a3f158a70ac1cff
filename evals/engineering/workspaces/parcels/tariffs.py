"""What a parcel costs to send, in cents."""

from __future__ import annotations

from models import Parcel

BANDS = [(2_000, 495), (5_000, 695), (10_000, 995), (31_500, 1_695)]
ABROAD_SURCHARGE = 650
SIGNED_FOR_SURCHARGE = 250


def price_cents(parcel: Parcel, signed_for: bool) -> int:
    for limit, cents in BANDS:
        if parcel.weight_grams <= limit:
            break
    else:
        raise ValueError(f"{parcel.reference}: too heavy to send")
    if parcel.country != "NL":
        cents += ABROAD_SURCHARGE
    if signed_for:
        cents += SIGNED_FOR_SURCHARGE
    return cents
