"""A small address book that refuses duplicate phone numbers."""

from __future__ import annotations

from dataclasses import dataclass, field

from phone import normalize_phone


@dataclass
class AddressBook:
    country: str = "GB"
    entries: dict[str, str] = field(default_factory=dict)
    """Normalized number -> name."""

    def add(self, name: str, number: str) -> str:
        key = normalize_phone(number, self.country)
        if key in self.entries:
            raise ValueError(f"{number} is already saved for {self.entries[key]}")
        self.entries[key] = name
        return key

    def lookup(self, number: str) -> str | None:
        return self.entries.get(normalize_phone(number, self.country))
