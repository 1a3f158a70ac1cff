"""The bookshop's data: books and orders."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Book:
    isbn: str
    title: str
    price_cents: int
    stock: int = 0


@dataclass
class Order:
    customer: str
    lines: list[tuple[Book, int]] = field(default_factory=list)
    coupon: str | None = None

    def add(self, book: Book, quantity: int = 1) -> None:
        if quantity > book.stock:
            raise ValueError(f"only {book.stock} of {book.title!r} in stock")
        self.lines.append((book, quantity))
