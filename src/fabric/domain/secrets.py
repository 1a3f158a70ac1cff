"""The secrets fabric knows, and the one way they are kept out of everything it writes.

A ``Secrets`` value holds the strings that must never leave fabric: the configured API keys,
the HTTP service token, the values of environment variables whose names look secret
(``SECRET_NAME``, the same rule that keeps them from tools), and the header values a telemetry
collector is sent (``HEADER_LISTS``). It is built once in the composition root and handed to
whatever writes output (the runlog writer, the CLI, the HTTP service, the spans); ``redact``
replaces every occurrence with ``[redacted]``.

Each secret is matched in the forms it takes in fabric's output: as it is, JSON-escaped (both
with and without ``ensure_ascii``) and URL-encoded. ``Bearer <key>`` becomes
``Bearer [redacted]``. Values shorter than ``MIN_CHARS`` are ignored: an environment variable
set to ``1`` or ``true`` is no secret worth mangling every text for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH(?!OR)|COOKIE", re.IGNORECASE)
"""Environment variable names that look like secrets: they never reach tools, and their values
never reach fabric's output."""
HEADER_LISTS = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")
"""Variables holding ``name=value,...`` headers for a telemetry collector: every value is a
secret (it is often the collector's API key), whatever the variable is called."""
MIN_CHARS = 8
"""Shorter values are not treated as secrets (they would match ordinary text)."""
REDACTED = "[redacted]"


_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def hide_credentials(text: str) -> str:
    """``text`` with the user and password of every URL in it shown as ``***``
    (``postgresql://***@db/fabric``)."""
    return _USERINFO.sub("***@", text)


def looks_secret(name: str) -> bool:
    """Whether an environment variable called ``name`` holds a secret, by its name."""
    return SECRET_NAME.search(name) is not None


class Secrets:
    """Strings to redact, with one compiled pattern (every form of every secret, longest
    first, so a secret that contains another is replaced whole). Immutable; an empty one
    redacts nothing and costs nothing."""

    __slots__ = ("_forms", "_pattern", "values")

    def __init__(self, values: Iterable[str] = ()) -> None:
        self.values: frozenset[str] = frozenset(v for v in values if len(v) >= MIN_CHARS)
        forms = {form for value in self.values for form in _forms(value)}
        self._forms = tuple(sorted(forms, key=lambda f: (-len(f), f)))
        self._pattern = re.compile("|".join(map(re.escape, self._forms))) if forms else None

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], names: Iterable[str] = (), *, also: Iterable[str] = ()
    ) -> Secrets:
        """The values in ``env`` of every variable whose name looks secret and of ``names``
        (e.g. a backend's ``api_key_env``, whatever they are called), the header values of
        ``HEADER_LISTS``, plus ``also``."""
        found = [value for name, value in env.items() if looks_secret(name)]
        found += [env[name] for name in names if env.get(name)]
        found += [v for name in HEADER_LISTS for v in _header_values(env.get(name, ""))]
        return cls([*found, *also])

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __repr__(self) -> str:  # never the values themselves
        return f"Secrets({len(self.values)} values)"

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``[redacted]``; ``text`` itself (the same
        object) when it holds none."""
        # A substring test per form first: C-speed, and the usual case is "none there". The
        # pattern alone is slower on long texts and many secrets (it tries every alternative
        # at every position): 79 against 208 us for 43 kB and 11 forms, 340 against 2,460 us
        # with 51.
        if self._pattern is None or not any(map(text.__contains__, self._forms)):
            return text
        return self._pattern.sub(REDACTED, text)

    def redact_json(self, text: str) -> str:
        """A JSON text with every secret replaced inside its strings; ``text`` itself when it
        holds none. Should the replacement leave text that is no JSON (a secret that also
        appears as a number, or that starts inside an escape sequence), the document is
        decoded, redacted value by value and encoded again (compact)."""
        safe = self.redact(text)
        if safe is text:
            return text
        try:
            json.loads(safe)
        except ValueError:
            try:
                value = json.loads(text)
            except ValueError:
                return safe  # it was no JSON to begin with
            return json.dumps(self.redact_obj(value), ensure_ascii=False, separators=(",", ":"))
        return safe

    def redact_obj(self, value: Any) -> Any:
        """A JSON-like value (dicts, lists, strings, numbers) with every string redacted,
        keys included; other values are kept as they are."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {self.redact_obj(k): self.redact_obj(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_obj(v) for v in value]
        return value

    def redact_lines(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """UTF-8 lines of JSON (a runlog), in chunks cut anywhere, redacted line by line
        (``redact_json``) and cut again at line ends, so no secret is split across chunks.
        The chunks go through as they are when there are no secrets."""
        if self._pattern is None:
            yield from chunks
            return
        pending = b""
        for chunk in chunks:
            data = pending + chunk
            end = data.rfind(b"\n") + 1
            pending = data[end:]
            if end:
                yield self._redact_lines(data[:end])
        if pending:
            yield self._redact_lines(pending)

    def _redact_lines(self, data: bytes) -> bytes:
        text = data.decode("utf-8", "surrogateescape")
        if self.redact(text) is text:
            return data
        lines = [self.redact_json(line) for line in text.split("\n")]
        return "\n".join(lines).encode("utf-8", "surrogateescape")

    def held_back(self, text: str) -> int:
        """How many characters at the end of ``text`` could be the start of a secret that
        more text would complete: a stream shows all but those until it knows."""
        longest = 0
        for form in self._forms:
            for size in range(min(len(form) - 1, len(text)), longest, -1):
                if text.endswith(form[:size]):
                    longest = size
                    break
        return longest


def _header_values(headers: str) -> list[str]:
    """The values of ``name=value,name2=value2`` (URL-encoded, as OTLP header variables are)."""
    pairs = (item.partition("=") for item in headers.split(","))
    return [unquote(value).strip() for _name, sep, value in pairs if sep and value.strip()]


def _forms(value: str) -> set[str]:
    """How ``value`` can appear in what fabric writes."""
    forms = {
        value,
        value.strip(),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        quote(value),  # as in a path
        quote(value, safe=""),  # as in a query value or a header echoed in a URL
        quote_plus(value, safe=""),  # as in a form body
    }
    return {form for form in forms if len(form) >= MIN_CHARS}
