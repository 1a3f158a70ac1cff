"""``fabric --help`` answers from the copy of typer's rendering kept beside the command line,
without importing typer; the copy is exactly what typer renders, and a narrow terminal still
gets typer's own rendering."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fabric.interfaces.cli import top_help


def _fabric(*argv: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    command = Path(sys.executable).with_name("fabric")  # the installed command
    return subprocess.run(
        [sys.executable, "-X", "importtime", str(command), *argv],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


def _imported(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if "|" in line}


def test_the_kept_copy_is_what_typer_renders() -> None:
    assert top_help.COPY.read_text("utf-8") == top_help.render(), (
        "fabric's commands changed: run `python -m fabric.interfaces.cli.top_help` to write "
        "the copy of `fabric --help` anew"
    )


def test_fabric_help_prints_the_copy_without_importing_typer(tmp_path: Path) -> None:
    for columns in (None, 80, 200):  # a pipe counts as 80 columns, as click counts it
        done = _fabric("--help", columns=columns)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout == top_help.COPY.read_text("utf-8")
        assert "typer" not in _imported(done.stderr)


def test_a_narrow_terminal_gets_typers_own_rendering() -> None:
    done = _fabric("--help", columns=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout != top_help.COPY.read_text("utf-8")
    assert done.stdout.startswith("Usage: fabric [OPTIONS] COMMAND [ARGS]...")
    assert max(map(len, done.stdout.splitlines())) <= 60
    assert "typer" in _imported(done.stderr)
    # any other command line still goes to typer: a command's own help, no arguments at all,
    # and `python -m fabric --help` (typer names the command so)
    module = subprocess.run(
        [sys.executable, "-m", "fabric", "--help"], capture_output=True, text=True, timeout=120
    )
    assert module.stdout.startswith("Usage: python -m fabric [OPTIONS]"), module.stdout
    run = _fabric("run", "--help")
    assert run.returncode == 0 and "--pack" in run.stdout
    bare = _fabric()
    assert bare.returncode == 2 and bare.stderr.count("Usage: fabric") == 1


def _every_command_line() -> list[list[str]]:
    """Each command's and group's help, each group's commands' help, and a usage error of
    each command (an option it does not have)."""
    import typer

    from fabric.interfaces.cli.app import app

    whole = typer.main.get_group(app)
    lines: list[list[str]] = []
    for name, command in whole.commands.items():
        lines += [[name, "--help"], [name, "--no-such-option"]]
        for sub in getattr(command, "commands", {}):
            lines += [[name, sub, "--help"], [name, sub, "--no-such-option"]]
    return lines


def test_a_command_line_gets_the_same_answer_from_its_command_alone() -> None:
    """``fabric run ...`` is answered by an app of that one command (``one_command``): what
    it prints and its exit status are the whole app's, for every command fabric has."""
    from typer.testing import CliRunner

    from fabric.interfaces.cli.app import app, one_command

    lines = _every_command_line()
    assert ["run", "--help"] in lines and ["memory", "list", "--help"] in lines
    runner = CliRunner()
    for argv in lines:
        one = one_command(app, argv)
        assert one is not app and [c.callback for c in one.registered_commands] != [
            c.callback for c in app.registered_commands
        ]
        alone, whole = runner.invoke(one, argv), runner.invoke(app, argv)
        assert (alone.exit_code, alone.output) == (whole.exit_code, whole.output), argv
    for argv in ([], ["--help"], ["nosuch"], ["--no-such-option", "run"]):
        assert one_command(app, argv) is app
