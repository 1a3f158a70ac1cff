"""What the party costs each guest."""


def split_cost(total: int, guests: list[str]) -> list[int]:
    """Each guest's share of ``total`` cents, in the guests' order; the shares add up to the
    total, the first guests paying a cent more where it does not divide evenly."""
    if not guests:
        raise ValueError("there are no guests to split the cost between")
    if total < 0:
        raise ValueError("the total cannot be negative")
    share, left = divmod(total, len(guests))
    return [share + (1 if i < left else 0) for i in range(len(guests))]
