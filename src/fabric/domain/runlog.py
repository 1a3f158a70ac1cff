"""The runlog format's versions: the one this fabric writes and every one it can read.

Each line of a runlog carries ``v``. Version 1 is the first format; version 2 adds the policy
and approval events and the OS confinement in ``run_started``; version 3 the ``verification``
event, ``run_started.verify`` and the status ``unverified`` (docs/adr/0003). A reader takes
every version up to ``FORMAT_VERSION`` (a resumed old run can hold lines of several versions)
and refuses a later one with ``check_versions``, rather than misreading it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .errors import ConfigError

FORMAT_VERSION = 3
"""The version this fabric writes."""
READABLE_VERSIONS = tuple(range(1, FORMAT_VERSION + 1))
"""Every version fabric ever wrote; all of them stay readable."""


def check_versions(events: Iterable[Mapping[str, Any]], source: str = "the runlog") -> None:
    """Raise ``ConfigError`` when a line of ``events`` has a format version this fabric does
    not know (written by a newer fabric); lines without a version are left to the reader."""
    for event in events:
        version = event.get("v")
        if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            raise ConfigError(
                f"{source} is in runlog format version {version} (line seq "
                f"{event.get('seq', '?')}), written by a newer fabric; this fabric reads "
                f"versions {READABLE_VERSIONS[0]} to {FORMAT_VERSION}",
                hint="upgrade fabric (pip install --upgrade agent-fabric) to read it",
            )


__all__ = ["FORMAT_VERSION", "READABLE_VERSIONS", "check_versions"]
