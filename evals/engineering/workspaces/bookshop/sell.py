"""`python sell.py CUSTOMER ISBN [COUPON]`: prints the receipt of a one-book order."""

from __future__ import annotations

import sys

from shop import Order, load_catalog, receipt


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: sell.py CUSTOMER ISBN [COUPON]", file=sys.stderr)
        return 2
    books = load_catalog("catalog.json")
    if argv[1] not in books:
        print(f"sell: no book with ISBN {argv[1]}", file=sys.stderr)
        return 1
    order = Order(argv[0], coupon=argv[2] if len(argv) == 3 else None)
    order.add(books[argv[1]])
    print(receipt(order))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
