"""User-facing texts in the user's language."""

from __future__ import annotations

CATALOG: dict[str, dict[str, str]] = {
    "en": {
        "greeting": "Hello, {name}!",
        "unread": "You have {count} new messages.",
        "farewell": "See you soon, {name}.",
    },
    "de": {
        "greeting": "Hallo, {name}!",
        "unread": "Sie haben {count} neue Nachrichten.",
        "farewell": "Bis bald, {name}.",
    },
    "fr": {"greeting": "Bonjour, {name} !", "unread": "Vous avez {count} nouveaux messages."},
}
"""Missing texts fall back to English."""

_language = "en"


def set_language(lang: str) -> None:
    global _language
    if lang not in CATALOG:
        raise ValueError(f"no texts for language {lang!r}; known: {', '.join(sorted(CATALOG))}")
    _language = lang


def translate(key: str, **values: object) -> str:
    template = CATALOG[_language].get(key) or CATALOG["en"][key]
    return template.format(**values)


def greet(name: str) -> str:
    return translate("greeting", name=name)


def unread(count: int) -> str:
    return translate("unread", count=count)


def farewell(name: str) -> str:
    return translate("farewell", name=name)
