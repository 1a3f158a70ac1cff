"""The venue: whether the party fits."""


def fits(capacity: int, guests: list[str], staff: int = 0) -> bool:
    """Whether the guests and the staff fit the venue's capacity."""
    if capacity < 0 or staff < 0:
        raise ValueError("capacity and staff cannot be negative")
    return len(guests) + staff <= capacity
