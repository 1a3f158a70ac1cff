"""The parcel as the warehouse scanner reports it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Parcel:
    reference: str
    weight_grams: int
    value_cents: int
    country: str
    """ISO 3166 alpha-2 code of the destination."""
    fragile: bool = False
