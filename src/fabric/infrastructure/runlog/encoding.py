"""How a runlog line is written (strict JSON, made fast: one C encoder per set of options, and
the UTC time stamp each line carries) and read back (``read_line``)."""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from json.encoder import (  # type: ignore[attr-defined]
    c_make_encoder,
    encode_basestring,
    encode_basestring_ascii,
)
from typing import Any

import orjson

from fabric.domain.clock import iso_z
from fabric.domain.json_text import read_json


def strict_json(record: Mapping[str, Any], **options: Any) -> str:
    """Strict JSON (no NaN or Infinity, which most JSON readers refuse): such numbers, e.g.
    from a tool argument like ``1e999``, are written as text."""
    encode = _encoder(**options)
    try:
        return encode(record)
    except ValueError:
        return encode(_finite(record))


@functools.lru_cache(maxsize=8)
def _encoder(**options: Any) -> Callable[[Any], str]:
    """One encoding function per set of options (``json.dumps`` with options builds an
    encoder every call). For a compact or default line, the C encoder is made once and called
    straight, as ``JSONEncoder.encode`` would call it but without making it again on every
    line; with no circular-reference check, which only changes the error a circular value
    gets (``_finite`` then recursed without end anyway)."""
    encoder = json.JSONEncoder(allow_nan=False, default=str, **options)
    if c_make_encoder is None or set(options) - {"ensure_ascii", "separators"}:
        return encoder.encode
    make = c_make_encoder(
        None,
        str,
        encode_basestring_ascii if encoder.ensure_ascii else encode_basestring,
        None,
        encoder.key_separator,
        encoder.item_separator,
        False,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )
    return lambda value: "".join(make(value, 0))


_LINE_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_APPEND_NEWLINE
)
"""Dates and dataclasses go to ``default`` (``str``), as ``json`` writes them; the line ends
in its newline (no copy made to add it)."""


def runlog_line(record: Mapping[str, Any]) -> bytes:
    """One runlog line as the file holds it (UTF-8, ending in a newline): ``strict_json(record,
    ensure_ascii=False, separators=(",", ":"))``, made by orjson where that gives the same JSON,
    5-8x as fast (a 500-byte event: about 1 µs against 6-10; five events a step). orjson
    writes NaN and Infinity as ``null``: a line with a ``null`` in it (two of a step's five
    have one: a reply's ``content``, a verdict's ``rule``) is kept when it reads back as the
    record, about 2 µs; else (a NaN there) it is made by ``strict_json``, as is a line orjson
    refuses (an integer past 64 bits, a lone surrogate, a key that is no string, nesting past
    255 levels). The values are the same either way; the text differs only where orjson spells
    a float's exponent without a leading zero (``1e-7`` for ``1e-07``) and writes a plain
    ``Enum`` as its value, not its name (fabric's own enum is a ``StrEnum``). A lone surrogate
    (a model can send one as a JSON escape) is written as the JSON escape it came from, so
    the line stays valid UTF-8 and valid JSON."""
    try:
        line = orjson.dumps(record, default=str, option=_LINE_OPTIONS)
    except orjson.JSONEncodeError:
        return _strict_line(record)
    if b"null" in line and orjson.loads(line) != record:
        return _strict_line(record)
    return line


def _strict_line(record: Mapping[str, Any]) -> bytes:
    text = strict_json(record, ensure_ascii=False, separators=(",", ":"))
    return (text + "\n").encode("utf-8", errors="backslashreplace")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def timestamp(moment: datetime) -> str:
    """A runlog line's time stamp for ``moment``, from a clock a caller gave (a test's); the
    system clock's is ``now_stamp``."""
    return iso_z(moment, "microseconds")


_second = (-1, "")
"""The second ``now_stamp`` last wrote in, and its text up to the fraction (read and set as
one value: threads share it)."""


def now_stamp() -> str:
    """``timestamp(utc_now())`` without the datetime: the system clock's now to the
    microsecond (rounded down, as ``datetime.now``), its date and time of day written once a
    second. Half the cost; one line of the runlog each."""
    global _second
    micros = time.time_ns() // 1000
    seconds = micros // 1_000_000
    second = _second
    if second[0] != seconds:
        second = _second = (seconds, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(seconds)))
    return "%s%06dZ" % (second[1], micros % 1_000_000)  # noqa: UP031 (the fastest here)


def read_line(line: bytes | str, *, constants_as_text: bool = False) -> Any:
    """One runlog line's JSON value, as ``json.loads`` reads it (``read_json``); ``ValueError``
    for a line that is no JSON, including one nested too deeply to read (a hostile log must
    not crash its reader). NaN and Infinity, which fabric never writes, are kept as text with
    ``constants_as_text``, as the writer would have written them; bytes are read as UTF-8 only
    (``json`` alone would take UTF-16 bytes too)."""
    return read_json(line, _with_constants_as_text if constants_as_text else _json)


def _json(line: bytes | str) -> Any:
    return json.loads(line.decode("utf-8") if isinstance(line, bytes) else line)


def _with_constants_as_text(line: bytes | str) -> Any:
    return json.loads(line.decode("utf-8") if isinstance(line, bytes) else line, parse_constant=str)
