"""Session tokens: issued at login, valid for a fixed time, checked on every request."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

SESSION_LENGTH = timedelta(hours=12)


class InvalidToken(Exception):
    """The token is unknown or has expired; the user has to log in again."""


@dataclass(frozen=True)
class Token:
    value: str
    user: str
    expires_at: datetime


def issue(user: str, now: datetime | None = None) -> Token:
    now = now or datetime.now(timezone.utc)
    return Token(secrets.token_urlsafe(24), user, now + SESSION_LENGTH)


def is_expired(token: Token, now: datetime | None = None) -> bool:
    """Whether ``token`` can no longer be used at ``now`` (a token expires at its
    ``expires_at`` instant)."""
    now = now or datetime.now(timezone.utc)
    return token.expires_at > now


class TokenStore:
    def __init__(self) -> None:
        self._tokens: dict[str, Token] = {}

    def login(self, user: str, now: datetime | None = None) -> Token:
        token = issue(user, now)
        self._tokens[token.value] = token
        return token

    def user_for(self, value: str, now: datetime | None = None) -> str:
        token = self._tokens.get(value)
        if token is None:
            raise InvalidToken("unknown token")
        if is_expired(token, now):
            del self._tokens[value]
            raise InvalidToken("session expired")
        return token.user
