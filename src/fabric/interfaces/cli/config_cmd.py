"""``fabric config show``: the configuration fabric would use here, every layer merged (built-in
defaults < the user's config < the project's fabric.yaml < FABRIC_* variables < options), as
YAML; with ``--origin``, where each value came from."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from .options import BackendOpt, ConfigOpt, JsonOpt
from .startup import load

config_app = typer.Typer(
    help="The configuration fabric uses: every layer merged, and where each value came from.",
    no_args_is_help=True,
)


@config_app.command(name="show")
def show(
    config: ConfigOpt = None,
    origin: Annotated[
        bool,
        typer.Option(
            "--origin",
            help="After each value, where it came from: file:line, $VARIABLE, --option, or "
            "default.",
        ),
    ] = False,
    backend: BackendOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the effective configuration as YAML: the packaged defaults, then
    ~/.config/fabric/config.yaml ($XDG_CONFIG_HOME), then the project's fabric.yaml, then
    FABRIC_* variables, then options, each over the one before. Secrets never appear: only
    whether each variable that holds one is set."""
    from .config_view import effective, render

    loaded = load(config, as_json, {"--backend": (("llm", "backend"), backend)})
    view = effective(loaded, os.environ)
    if as_json:
        typer.echo(json.dumps(view.as_json(origin), indent=2))
    else:
        typer.echo(render(view, with_origins=origin))
