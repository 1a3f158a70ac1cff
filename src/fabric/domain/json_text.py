"""Reading JSON that came from outside (a model's arguments, a runlog's lines): fast, and never
with an error other than ``ValueError``, however hostile the text."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec

_FAST = msgspec.json.Decoder().decode


def read_json(text: str | bytes, slow: Callable[[Any], Any] = json.loads) -> Any:
    """The JSON value of ``text`` as ``slow`` (a ``json`` decoder) reads it; ``ValueError``
    for text that is no JSON, including text nested too deeply for any reader (``json``
    raises ``RecursionError`` there). msgspec reads it first: the same values and types as
    ``json`` (an integer past 64 bits stays exact), about four times as fast; what it
    refuses (NaN, Infinity, a float too large, an escaped lone surrogate, bad JSON) goes to
    ``slow``, which reads it or says what is wrong in its own words."""
    try:
        return _FAST(text)
    except (msgspec.DecodeError, ValueError, RecursionError):  # ValueError: a lone surrogate
        pass
    try:
        return slow(text)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply to read") from None


__all__ = ["read_json"]
