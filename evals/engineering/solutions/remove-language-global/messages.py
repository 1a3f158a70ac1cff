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


def translate(key: str, lang: str = "en", **values: object) -> str:
    if lang not in CATALOG:
        raise ValueError(f"no texts for language {lang!r}; known: {', '.join(sorted(CATALOG))}")
    template = CATALOG[lang].get(key) or CATALOG["en"][key]
    return template.format(**values)


def greet(name: str, lang: str = "en") -> str:
    return translate("greeting", lang, name=name)


def unread(count: int, lang: str = "en") -> str:
    return translate("unread", lang, count=count)


def farewell(name: str, lang: str = "en") -> str:
    return translate("farewell", lang, name=name)
