"""``fabric show RUN --html``: the run as one self-contained HTML file (``share_html``), its
events redacted as ``fabric show`` redacts what it prints."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fabric.domain.secrets import Secrets
from fabric.interfaces.share_html import share_html

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def share_name(events: list[dict[str, Any]], runlog: Path) -> str:
    """``<run_id>.html``, the run id made safe as a file name (a runlog names its own run id:
    it must not be able to put the file anywhere but where it is asked to go)."""
    run_id = next((str(e["run_id"]) for e in events if e.get("run_id")), runlog.parent.name)
    stem = _UNSAFE.sub("_", run_id).strip("._") or "run"
    return f"{stem[:150]}.html"


def share_title(events: list[dict[str, Any]], runlog: Path) -> str:
    started = next((e for e in events if e.get("kind") == "run_started"), {})
    run_id = started.get("run_id") or runlog.parent.name
    pack = started.get("pack")
    return f"fabric run {run_id}" + (f" · {pack}" if pack else "")


def write_share(
    events: list[dict[str, Any]],
    runlog: Path,
    *,
    secrets: Secrets,
    out: Path | None = None,
    folder: Path | None = None,
) -> Path:
    """Write the share file of ``events`` to ``out`` (default: ``<run_id>.html`` in
    ``folder``, the current folder by default); return its path."""
    target = out if out is not None else (folder or Path.cwd()) / share_name(events, runlog)
    shown = secrets.redact_obj(events)
    text = share_html(shown, title=secrets.redact(share_title(events, runlog)))
    target.write_text(text, "utf-8")
    return target
