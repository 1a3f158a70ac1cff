"""Options several commands share, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="The project's fabric.yaml (default: $FABRIC_CONFIG, ./fabric.yaml, else the "
        "packaged default); it goes over ~/.config/fabric/config.yaml, FABRIC_* variables "
        "over it (see `fabric config show --origin`).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
YesOpt = Annotated[
    bool,
    typer.Option(
        "--yes",
        "-y",
        help="Approve every tool call the pack's policy asks about, without asking "
        "(by default you are asked at the terminal; with no terminal they are refused).",
    ),
]
BackendOpt = Annotated[
    str | None,
    typer.Option(
        "--backend",
        "-b",
        help="ollama, openai (any OpenAI-compatible server), anthropic, embedded, or auto "
        "(default: FABRIC_BACKEND, else llm.backend).",
    ),
]
