"""Quotes for Harrowgate Freight's road shipments: a base tariff a kilogram, and a fuel
surcharge on top, both by destination country."""

BASE_TARIFF = {"DE": 0.42, "NL": 0.45, "SE": 0.58, "NO": 0.60}
"""Euros a kilogram."""

FUEL_SURCHARGE = {"DE": 0.08, "NL": 0.08, "SE": 0.10, "NO": 0.12}
"""A share of the base price."""


def quote(country: str, kg: float) -> float:
    """The price in euros of sending ``kg`` kilograms to ``country`` (an ISO code)."""
    if country not in BASE_TARIFF:
        raise ValueError(f"we do not ship to {country}")
    base = BASE_TARIFF[country] * kg
    return round(base * (1 + FUEL_SURCHARGE[country]), 2)
