import pytest

from digest import digest
from handlers import handle, handle_all
from messages import greet, unread


def test_english_is_the_default():
    assert greet("Ana") == "Hello, Ana!"


def test_german():
    assert unread(3, "de") == "Sie haben 3 neue Nachrichten."


def test_unknown_language_is_refused():
    with pytest.raises(ValueError, match="xx"):
        greet("Ana", "xx")


def test_handle_in_french():
    assert handle({"name": "Léa", "lang": "fr", "unread": 2}) == {
        "to": "Léa",
        "text": "Bonjour, Léa ! Vous avez 2 nouveaux messages.",
    }


def test_handle_all_keeps_order():
    answers = handle_all([{"name": "A"}, {"name": "B", "lang": "de"}])
    assert [a["text"] for a in answers] == ["Hello, A!", "Hallo, B!"]


def test_digest_falls_back_to_english():
    assert digest("Léa", "fr", [0, 4]).splitlines() == [
        "Bonjour, Léa !",
        "Vous avez 4 nouveaux messages.",
        "See you soon, Léa.",
    ]
