"""Delivery rules the carrier contract imposes."""

from __future__ import annotations

from models import Parcel

SIGNATURE_FROM_CENTS = 25_000
SIGNATURE_COUNTRIES = frozenset({"IT", "GR", "MT"})
MAX_WEIGHT_GRAMS = 31_500


def requires_signature(parcel: Parcel) -> bool:
    """Valuable parcels, and every parcel to a country on the contract's list, are handed over
    against a signature only."""
    return parcel.value_cents > SIGNATURE_FROM_CENTS or parcel.country in SIGNATURE_COUNTRIES


def accepts(parcel: Parcel) -> bool:
    return 0 < parcel.weight_grams <= MAX_WEIGHT_GRAMS
