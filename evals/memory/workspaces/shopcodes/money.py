"""Amounts are integer cents everywhere in the shop."""


def percent_of(cents: int, percent: int) -> int:
    """``percent`` per cent of ``cents``, a half cent rounded up."""
    return (cents * percent * 2 + 100) // 200


def shown(cents: int) -> str:
    """``1234`` as ``12.34 EUR``."""
    return f"{cents // 100}.{cents % 100:02d} EUR"
