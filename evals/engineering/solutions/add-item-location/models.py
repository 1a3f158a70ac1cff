"""The records the stock API takes and sends."""

from dataclasses import dataclass


@dataclass
class Item:
    sku: str
    name: str
    quantity: int = 0
    location: str = "main"
