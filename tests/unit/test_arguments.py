"""A tool call's arguments are read as strict JSON, one object, whichever reader reads them."""

from __future__ import annotations

import json

import pytest

from fabric.domain.arguments import parse_arguments


@pytest.mark.parametrize(
    "text",
    [
        '{"path": "src/app.py", "content": "grüße 日本\\n\\u2028"}',
        '{"n": 123456789012345678901234567890, "m": -9223372036854775809, "z": -0}',
        '{"f": [0.1, 1e-07, -0.0, 5e-324, 1.7976931348623157e308, 1E5, 1e-400]}',
        '{"s": "a\\ud800b", "t": "\\ud83d\\ude00", "u": "\\u0000"}',
        '{"a": 1, "a": 2}',
        '  {"deep": [[[{"x": [true, false, null]}]]]}  \n',
        '{"big": 123456789012345678901234567890.5}',
    ],
)
def test_arguments_read_as_json_reads_them(text: str) -> None:
    """msgspec reads most arguments; what it refuses (an escaped lone surrogate) is read by
    ``json``: either way the values, and their types, are what ``json`` makes of the text."""
    arguments, raw, error = parse_arguments(text)
    assert error is None and raw == text
    assert repr(arguments) == repr(json.loads(text))


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"a": NaN}', "NaN is not valid JSON"),
        ('{"a": -Infinity}', "-Infinity is not valid JSON"),
        ('{"a": 1e999}', "1e999 is too large a number"),
        ('{"a": "x\ty"}', "Invalid control character"),
        ('{"a": 1,}', "Expecting property name"),
        ('{"a": 1} x', "Extra data"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_arguments_that_are_no_strict_json_say_what_is_wrong(text: str, error: str) -> None:
    arguments, raw, said = parse_arguments(text)
    assert arguments is None and raw == text
    assert said is not None and said.startswith("invalid JSON") and error in said
