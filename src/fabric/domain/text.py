"""Text from a model or a workspace, made safe to show to the next reader."""

from __future__ import annotations

import unicodedata

_INVISIBLE = ("Cf", "Cs")
"""Format characters (zero-width ones, the bidirectional controls that make text read
otherwise than it is, byte order marks, the tag characters a model reads and a person does
not see) and lone surrogates."""


def without_invisible(text: str) -> str:
    """``text`` without the characters a person does not see but a model reads (``_INVISIBLE``);
    ASCII text, which has none, as it is."""
    if text.isascii():
        return text
    return "".join(c for c in text if unicodedata.category(c) not in _INVISIBLE)
