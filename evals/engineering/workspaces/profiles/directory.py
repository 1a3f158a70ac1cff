"""The user directory (an in-memory stand-in for the database)."""

from __future__ import annotations

USERS = {
    1: {"name": "Ana Ruiz", "photo": "ana.png", "orders": [f"A{n}" for n in range(1, 26)]},
    11: {"name": "Ben Okoro", "photo": "ben.jpg", "orders": ["B1", "B2"]},
    12: {"name": "Chen Wu", "photo": "chen.png", "orders": [f"C{n}" for n in range(1, 13)]},
}
LOOKUPS: list[str] = []
"""Every query that reached the directory, for tests and the slow-query log."""


def fetch_user(user_id: int) -> dict:
    LOOKUPS.append(f"user {user_id}")
    return USERS[user_id]
