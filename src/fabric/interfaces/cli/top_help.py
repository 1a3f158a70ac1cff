"""``fabric --help``, kept as text beside the command line (``top_help.txt``).

Importing typer alone takes longer than the whole answer should (about 0.1 s of a 0.2 s
``fabric --help`` on this project's machine), so ``fabric --help`` prints this copy without
importing it (``fabric.__main__``), for terminals at least as wide as click's help (80
columns); a narrower one gets typer's own rendering. The copy is typer's rendering itself: a
test compares the two, and ``python -m fabric.interfaces.cli.top_help`` writes it anew after
a command was added, renamed or described otherwise."""

from __future__ import annotations

from pathlib import Path

COPY = Path(__file__).with_name("top_help.txt")
WIDTH = 80
"""The widest help click renders (its ``max_width``): at this width or wider, one text."""


def render() -> str:
    """``fabric --help`` as typer renders it for a terminal of ``WIDTH`` columns."""
    from typer.testing import CliRunner

    from .app import app

    # click fills its help to two columns short of the terminal's width
    result = CliRunner().invoke(app, ["--help"], terminal_width=WIDTH - 2)
    if result.exit_code != 0:
        raise RuntimeError(f"fabric --help failed: {result.output}")
    return result.output


if __name__ == "__main__":
    COPY.write_text(render(), encoding="utf-8")
    print(f"wrote {COPY}")
