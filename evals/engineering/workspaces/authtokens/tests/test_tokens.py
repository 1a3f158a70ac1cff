from datetime import datetime, timedelta, timezone

import pytest

from tokens import InvalidToken, TokenStore, is_expired, issue

NOON = datetime(2024, 6, 1, 12, 0, tzinfo=timezone.utc)


def test_fresh_token_is_not_expired():
    assert not is_expired(issue("ana", NOON), NOON + timedelta(minutes=5))


def test_token_expires_after_the_session_length():
    assert is_expired(issue("ana", NOON), NOON + timedelta(hours=13))


def test_store_returns_the_user_of_a_fresh_token():
    store = TokenStore()
    token = store.login("ana", NOON)
    assert store.user_for(token.value, NOON + timedelta(hours=1)) == "ana"


def test_store_refuses_unknown_tokens():
    with pytest.raises(InvalidToken, match="unknown"):
        TokenStore().user_for("nope", NOON)
