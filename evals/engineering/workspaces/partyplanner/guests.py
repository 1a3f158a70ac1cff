"""The guest list: who comes, what they eat, how many tables they need."""

from collections import Counter


def seats_needed(guests: list[str], per_table: int) -> int:
    """Tables needed to seat every guest, ``per_table`` to a table."""
    if per_table < 1:
        raise ValueError("per_table must be at least 1")
    return -(-len(guests) // per_table)


def dietary_counts(diets: dict[str, str]) -> dict[str, int]:
    """How many guests eat each diet, from a guest -> diet mapping ('' means no wishes)."""
    return dict(Counter(diet or "any" for diet in diets.values()))
