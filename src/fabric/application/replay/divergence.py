"""Comparing a replay with its recording: the first difference, where it is, and how it reads.

A difference is named by the step it happened at and a field path into what was compared
(``messages[3].content``, ``tools[0].function.description``, ``payload.answer``, ``policy``);
both values are shown as short JSON, for two strings around the place they part.
"""

from __future__ import annotations

import json
from typing import Any

from msgspec import Struct

from fabric.domain.errors import FabricError

ABSENT = "<absent>"
"""Shown for a key or list item one side does not have."""
_SHOWN = 160


class Divergence(Struct, frozen=True):
    """Where a replay first differed from the recording: the step, the field (a path such as
    ``messages[3].content``), and both values as short reprs."""

    step: int
    field: str
    recorded: str
    now: str

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "field": self.field, "recorded": self.recorded, "now": self.now}

    def __str__(self) -> str:
        return (
            f"diverged at step {self.step}, {self.field}\n"
            f"  recorded: {self.recorded}\n"
            f"  now:      {self.now}"
        )


class Diverged(FabricError):
    """The replay no longer matches the recording."""

    CODE = "diverged"

    def __init__(self, divergence: Divergence) -> None:
        super().__init__(
            f"the replay diverged at step {divergence.step}, {divergence.field}: "
            f"recorded {divergence.recorded}, now {divergence.now}",
            hint="the pack, its prompts, its tools or its policy changed since the run was "
            "recorded",
        )
        self.divergence = divergence


class ReplayState:
    """What the replay's parts share: the model call it is at, and the first divergence."""

    def __init__(self) -> None:
        self.divergence: Divergence | None = None
        self.step = 0
        """The model call the replay is at (1-based)."""

    def diverge(self, step: int, field: str, recorded: Any, now: Any) -> Divergence:
        """Note a difference (only the first one counts) and return the one that counts."""
        if self.divergence is None:
            shown_recorded, shown_now = show_pair(recorded, now)
            self.divergence = Divergence(step, field, shown_recorded, shown_now)
        return self.divergence


def plain(value: Any) -> Any:
    """``value`` as the runlog holds it: through a JSON round trip."""
    return json.loads(json.dumps(value, default=str))


def first_difference(recorded: Any, now: Any, path: str) -> tuple[str, Any, Any] | None:
    """The first place two JSON values differ, as (path, recorded, now); None when equal."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        for key in [*recorded, *(k for k in now if k not in recorded)]:
            if key not in now or key not in recorded:
                return f"{path}.{key}", recorded.get(key, ABSENT), now.get(key, ABSENT)
            found = first_difference(recorded[key], now[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(recorded, list) and isinstance(now, list):
        for index, (a, b) in enumerate(zip(recorded, now, strict=False)):
            found = first_difference(a, b, f"{path}[{index}]")
            if found:
                return found
        if len(recorded) != len(now):
            index = min(len(recorded), len(now))
            return (
                f"{path}[{index}]",
                recorded[index] if index < len(recorded) else ABSENT,
                now[index] if index < len(now) else ABSENT,
            )
        return None
    if type(recorded) is not type(now) or recorded != now:
        return path, recorded, now
    return None


def first_difference_in_list(
    recorded: list[Any], now: list[Any], path: str, start: int = 0
) -> tuple[str, Any, Any] | None:
    """``first_difference`` of two lists whose first ``start`` items are known to be equal
    (compared before): only the rest is compared, with the items' indices in the path."""
    for index in range(start, min(len(recorded), len(now))):
        found = first_difference(recorded[index], now[index], f"{path}[{index}]")
        if found:
            return found
    if len(recorded) != len(now):
        index = max(start, min(len(recorded), len(now)))
        return (
            f"{path}[{index}]",
            recorded[index] if index < len(recorded) else ABSENT,
            now[index] if index < len(now) else ABSENT,
        )
    return None


def show_pair(recorded: Any, now: Any) -> tuple[str, str]:
    """Short reprs; for two strings, the part around where they first differ."""
    if isinstance(recorded, str) and isinstance(now, str) and recorded != ABSENT != now:
        start = next(
            (i for i, (a, b) in enumerate(zip(recorded, now, strict=False)) if a != b),
            min(len(recorded), len(now)),
        )
        start = max(0, start - 40)
        return _clip_repr(recorded, start), _clip_repr(now, start)
    return _clip_repr(recorded, 0), _clip_repr(now, 0)


def _clip_repr(value: Any, start: int) -> str:
    if value == ABSENT or not isinstance(value, str):
        text = value if value == ABSENT else json.dumps(value, ensure_ascii=False, default=str)
        return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"
    piece = value[start : start + _SHOWN]
    shown = json.dumps(piece, ensure_ascii=False)
    prefix = "…" if start > 0 else ""
    suffix = "…" if start + _SHOWN < len(value) else ""
    return prefix + shown + suffix


__all__ = [
    "ABSENT",
    "Diverged",
    "Divergence",
    "ReplayState",
    "first_difference",
    "first_difference_in_list",
    "plain",
    "show_pair",
]
