"""Reading a tool call's arguments, the same way in every chat adapter (and the scripted
client): strict JSON, one object. What is not is kept raw, with what is wrong, so the loop can
tell the model."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .json_text import read_json


def parse_arguments(value: Any) -> tuple[dict[str, Any] | None, str, str | None]:
    """``(arguments, raw, error)`` for arguments sent as a JSON string or as an object.

    Empty or missing arguments are ``{}``. NaN, Infinity and numbers too large for a float are
    refused: they are not JSON, and no strict JSON reader of the runlog would take them.
    """
    if isinstance(value, Mapping):
        try:
            return dict(value), json.dumps(value, allow_nan=False), None
        except ValueError as exc:
            return None, json.dumps(value), f"invalid JSON ({exc})"
    text = "" if value is None else str(value)
    if not text.strip():
        return {}, "{}", None
    try:
        parsed = read_json(text, _DECODER.decode)
    except ValueError as exc:  # the model is told, as of any bad arguments: the run goes on
        return None, text, f"invalid JSON ({exc})"
    if not isinstance(parsed, dict):
        return None, text, f"expected an object, got {type(parsed).__name__}"
    return parsed, text, None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large a number")
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
"""One decoder for every call (``json.loads`` with options builds a new one each time)."""
