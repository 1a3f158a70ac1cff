"""The file tools on real files: what they do inside the workspace, and that nothing outside it
can be read, listed, searched or written, whatever path the model sends."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from fabric.application.context import ToolContext
from fabric.config.schema import SandboxSettings
from fabric.domain.errors import SandboxError, ToolError
from fabric.infrastructure.tools import beneath, files
from fabric.infrastructure.tools.files import list_files, read_file, search_files, write_file
from fabric.infrastructure.tools.library import library_tools

SECRET = "TOP-SECRET-OUTSIDE-CONTENT"


@pytest.fixture(autouse=True, params=["openat2", "walk"])
def opener(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs twice: paths opened by openat2(2), and by the walk that stands in where
    the kernel has no openat2."""
    if request.param == "walk":
        monkeypatch.setattr(beneath, "_syscall", lambda: None)
    return str(request.param)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the workspace with a secret file in it."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(SECRET + "\n")
    return folder


def read(ctx: ToolContext, path: str, **options: Any) -> str:
    """read_file is async (it reads large files in a worker thread)."""
    return asyncio.run(read_file(ctx, path, **options))


def text_of(shown: str) -> str:
    """read_file's numbered lines ("  12| text") as the text they show."""
    return "".join(line.split("| ", 1)[1] + "\n" for line in shown.splitlines() if "| " in line)


def files_in(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): p.read_text()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


# --- read_file ------------------------------------------------------------------------------


def test_read_file_returns_the_text(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("def f():\n    return 1\n")
    assert read(ctx, "src/app.py") == "  1| def f():\n  2|     return 1\n"
    assert read(ctx, "./src/../src/app.py") == "  1| def f():\n  2|     return 1\n"


def test_read_file_window_says_how_to_read_on(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    text = read(ctx, "long.txt", start_line=10, max_lines=50)
    assert text.startswith(" 10| line 10\n 11| line 11\n 12| line 12\n")
    assert " 59| line 59\n" in text and "line 60" not in text
    assert "lines 10-59 of 100 shown" in text
    assert "start_line=60" in text


def test_read_file_shows_at_least_forty_lines(ctx: ToolContext, workspace: Path) -> None:
    """A small model pages through a file two lines at a time and runs out of steps."""
    (workspace / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    text = read(ctx, "long.txt", start_line=11, max_lines=2)
    assert " 11| line 11\n" in text and " 50| line 50\n" in text and "line 51" not in text
    assert "lines 11-50 of 100 shown" in text
    # the last window has no "more" note
    assert read(ctx, "long.txt", start_line=99) == " 99| line 99\n100| line 100\n"


def test_read_file_past_the_end_says_how_long_the_file_is(
    ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "short.txt").write_text("a\nb\n")
    with pytest.raises(ToolError, match="has 2 lines"):
        read(ctx, "short.txt", start_line=5)
    (workspace / "empty.txt").write_text("")
    assert read(ctx, "empty.txt") == "(the file is empty)"


def test_read_file_line_numbers_match_search_results(ctx: ToolContext, workspace: Path) -> None:
    """Form feeds and other odd separators must not shift read_file's numbering away from
    the line numbers search_files reports."""
    (workspace / "odd.py").write_text("a = 1\f\nb = 2\x1c still b\nc = 3\r\nneedle = 4\n")
    hit = search_files(ctx, "needle")
    assert hit.startswith("odd.py:4: needle = 4")
    assert read(ctx, "odd.py", start_line=4, max_lines=1).startswith("  4| needle = 4")


def test_read_file_large_file_is_read_in_windows(ctx: ToolContext, workspace: Path) -> None:
    line = "x" * 99 + "\n"
    (workspace / "big.log").write_text(line * 60_000 + "THE END\n")  # about 6 MB
    text = read(ctx, "big.log", start_line=2, max_lines=50)
    assert text_of(text) == line * 50
    assert text.startswith("  2| x")
    assert "goes on" in text
    assert "start_line=52" in text
    assert read(ctx, "big.log", start_line=60_001).startswith("60001| THE END")


def test_read_file_cuts_an_enormous_line(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "min.js").write_text("y" * 2_000_000 + "\nnext\n")
    text = read(ctx, "min.js")
    assert len(text) < 600_000
    assert "line 1 is longer than" in text
    assert "start_line=2" in text


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\n",
        b"one line, no end",
        b"a\r\nb\rc\n\rd\r\n",  # \r\n and a lone \r are line ends, as the text file reads them
        b"\xef\xbb\xbfbom\n\xff\xfe bad utf-8 \xe2\x82\n\f form feed\x1c\xe2\x80\xa8 kept\n",
        b"x\n" * 120 + b"last, no end",
        "Gr\u00fc\u00dfe \u65e5\u672c\n".encode() * 30,
    ],
)
def test_read_file_reads_a_small_file_at_once_as_line_by_line(
    ctx: ToolContext, workspace: Path, monkeypatch: pytest.MonkeyPatch, content: bytes
) -> None:
    """A small file is read in one go; what it shows is what the line-by-line loop shows."""
    (workspace / "f.txt").write_bytes(content)
    windows = [{}, {"start_line": 2}, {"start_line": 41, "max_lines": 1}, {"start_line": 200}]

    def answers() -> list[str]:
        shown = []
        for options in windows:
            try:
                shown.append(read(ctx, "f.txt", **options))
            except ToolError as exc:
                shown.append(f"error: {exc}")
        return shown

    at_once = answers()
    monkeypatch.setattr(files, "_WHOLE_READ_BYTES", -1)
    assert at_once == answers()


def test_read_file_refuses_binary_folders_and_missing_files(
    ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (workspace / "dir").mkdir()
    with pytest.raises(ToolError, match="looks binary"):
        read(ctx, "img.png")
    with pytest.raises(ToolError, match="not a file"):
        read(ctx, "dir")
    with pytest.raises(ToolError, match=r"there is no file 'missing\.txt' in the workspace root"):
        read(ctx, "missing.txt")


# --- write_file -----------------------------------------------------------------------------


def test_write_file_creates_folders_and_appends(ctx: ToolContext, workspace: Path) -> None:
    assert write_file(ctx, "pkg/sub/mod.py", "x = 1\n") == "wrote 6 bytes to pkg/sub/mod.py"
    assert (workspace / "pkg" / "sub" / "mod.py").read_text() == "x = 1\n"
    assert "appended" in write_file(ctx, "pkg/sub/mod.py", "y = 2\n", append=True)
    assert (workspace / "pkg" / "sub" / "mod.py").read_text() == "x = 1\ny = 2\n"
    write_file(ctx, "pkg/sub/mod.py", "z = 3\n")
    assert (workspace / "pkg" / "sub" / "mod.py").read_text() == "z = 3\n"


def test_write_file_onto_a_folder_or_through_a_file_is_a_tool_error(
    ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "dir").mkdir()
    (workspace / "plain.txt").write_text("keep")
    with pytest.raises(ToolError, match="is a directory"):
        write_file(ctx, "dir", "x")
    with pytest.raises(ToolError, match=r"cannot write 'plain\.txt/inner\.txt'"):
        write_file(ctx, "plain.txt/inner.txt", "x")
    assert (workspace / "plain.txt").read_text() == "keep"


def test_write_file_refuses_protected_folders(workspace: Path) -> None:
    runs = workspace / "runs"
    (runs / "r1").mkdir(parents=True)
    (runs / "r1" / "runlog.jsonl").write_text("{}\n")
    (workspace / "runs_link").symlink_to(runs)
    ctx = ToolContext("t", workspace, SandboxSettings(), protected=(runs,))
    for path in ("runs/r1/runlog.jsonl", "runs/new.txt", "runs_link/r1/runlog.jsonl", "runs"):
        with pytest.raises(SandboxError, match="protected"):
            write_file(ctx, path, "tampered")
    assert (runs / "r1" / "runlog.jsonl").read_text() == "{}\n"
    assert sorted(p.name for p in runs.iterdir()) == ["r1"]
    # elsewhere in the workspace is fine
    write_file(ctx, "notes.txt", "ok")


def test_write_file_refuses_git_internals(ctx: ToolContext, workspace: Path) -> None:
    """A hook or config written into .git/ would run later, outside any sandbox."""
    hooks = workspace / ".git" / "hooks"
    hooks.mkdir(parents=True)
    (workspace / "sub").mkdir()
    (workspace / "sub" / "gitdir").symlink_to(workspace / ".git")
    for path in (".git/hooks/pre-commit", ".git/config", "sub/gitdir/hooks/post-checkout"):
        with pytest.raises(SandboxError, match=r"\.git"):
            write_file(ctx, path, "#!/bin/sh\ntouch pwned\n")
    assert list(hooks.iterdir()) == []
    assert not (workspace / ".git" / "config").exists()
    # names that merely look like it are ordinary files
    write_file(ctx, ".gitignore", "*.pyc\n")
    write_file(ctx, "docs/.github/x.md", "x")


def test_write_file_refuses_read_only_host_code(workspace: Path) -> None:
    """fabric.yaml and pack sources run later outside the sandbox: readable, never written,
    also not through a symlink or a hard link, and no folder is made in them."""
    (workspace / "fabric.yaml").write_text("packs: {}\n")
    (workspace / "packs").mkdir()
    (workspace / "packs" / "engineering.py").write_text("BUILD = 1\n")
    (workspace / "cfg_link").symlink_to("fabric.yaml")
    (workspace / "packs_link").symlink_to(workspace / "packs")
    os.link(workspace / "fabric.yaml", workspace / "hard.yaml")
    read_only = (workspace / "fabric.yaml", workspace / "packs")
    ctx = ToolContext("t", workspace, SandboxSettings(), read_only=read_only)
    before = files_in(workspace)
    with pytest.raises(SandboxError) as info:
        write_file(ctx, "packs/engineering.py", "BUILD = 2\n")
    assert info.value.message == (
        "'packs/engineering.py' is read-only for tools: fabric or your own tools execute it "
        "later outside the sandbox (it is inside 'packs/')"
    )
    assert info.value.hint
    with pytest.raises(SandboxError, match=r"^'fabric.yaml' is read-only for tools: .*host code"):
        write_file(ctx, "fabric.yaml", "packs: {evil: x}\n")
    for path in ("packs/new.py", "packs/sub/mod.py", "cfg_link", "packs_link/engineering.py"):
        with pytest.raises(SandboxError, match="is read-only for tools"):
            write_file(ctx, path, "x", append=True)
    with pytest.raises(SandboxError, match="hard link"):
        write_file(ctx, "hard.yaml", "x")
    assert files_in(workspace) == before
    assert sorted(p.name for p in (workspace / "packs").iterdir()) == ["engineering.py"]
    assert text_of(read(ctx, "packs/engineering.py")) == "BUILD = 1\n"  # reading is fine
    write_file(ctx, "packs.txt", "elsewhere is fine\n")


def test_write_file_refuses_files_the_interpreter_runs_at_start_up(
    ctx: ToolContext, workspace: Path
) -> None:
    """sitecustomize.py, usercustomize.py and .pth files run in every Python that finds
    them; anything inside a virtualenv runs when it is used. Refused anywhere, with why."""
    (workspace / "env" / "lib").mkdir(parents=True)
    (workspace / "env" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (workspace / "alias.txt").symlink_to("hook.pth")  # a name that hides the real one
    before = sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*"))
    with pytest.raises(SandboxError) as info:
        write_file(ctx, "src/evil.pth", "import os\n")
    assert info.value.message == (
        "'src/evil.pth' is read-only for tools: the Python interpreter runs .pth files at "
        "start-up, outside the sandbox"
    )
    for path in ("sitecustomize.py", "lib/usercustomize.py", "alias.txt"):
        with pytest.raises(SandboxError, match=r"the Python interpreter runs .* at start-up"):
            write_file(ctx, path, "import os\n")
    with pytest.raises(SandboxError) as info:
        write_file(ctx, "env/lib/site.py", "x")
    assert info.value.message.startswith(
        "'env/lib/site.py' is read-only for tools: it is inside the virtualenv 'env/'"
    )
    with pytest.raises(SandboxError, match="inside the virtualenv 'env/'"):
        write_file(ctx, "env/bin/activate", "x")
    assert sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*")) == before
    write_file(ctx, "site.py", "fine\n")  # an ordinary name outside a virtualenv
    write_file(ctx, "notes.pth.txt", "fine\n")


def test_protected_folders_are_neither_listed_nor_walked(workspace: Path) -> None:
    runs = workspace / "runs"
    (runs / "r1").mkdir(parents=True)
    (runs / "r1" / "runlog.jsonl").write_text("needle\n")
    (workspace / "a.txt").write_text("needle\n")
    ctx = ToolContext("t", workspace, SandboxSettings(), protected=(runs,))
    assert list_files(ctx, recursive=True).splitlines() == ["runs/", "a.txt"]
    assert search_files(ctx, "needle") == "a.txt:1: needle"
    with pytest.raises(SandboxError, match="protected"):
        list_files(ctx, "runs")
    with pytest.raises(SandboxError, match="protected"):
        read(ctx, "runs/r1/runlog.jsonl")


# --- list_files -----------------------------------------------------------------------------


def test_list_files(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "src" / "pkg").mkdir(parents=True)
    (workspace / "src" / "pkg" / "a.py").write_text("")
    (workspace / "README.md").write_text("")
    (workspace / ".git").mkdir()
    (workspace / ".git" / "HEAD").write_text("ref")
    (workspace / "__pycache__").mkdir()
    (workspace / "__pycache__" / "x.pyc").write_text("")
    assert list_files(ctx).splitlines() == ["src/", "README.md"]
    assert list_files(ctx, recursive=True).splitlines() == [
        "src/",
        "README.md",
        "src/pkg/",
        "src/pkg/a.py",
    ]
    assert list_files(ctx, "src/pkg") == "src/pkg/a.py"
    (workspace / "empty").mkdir()
    assert list_files(ctx, "empty") == "(empty)"
    with pytest.raises(ToolError, match="not a folder"):
        list_files(ctx, "README.md")


def test_list_files_stops_at_max_entries(ctx: ToolContext, workspace: Path) -> None:
    for i in range(20):
        (workspace / f"f{i:02}.txt").write_text("")
    lines = list_files(ctx, max_entries=5).splitlines()
    assert lines[:5] == ["f00.txt", "f01.txt", "f02.txt", "f03.txt", "f04.txt"]
    assert lines[5] == "[... stopped at 5 entries ...]"


# --- search_files ---------------------------------------------------------------------------


def test_search_files(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "a.py").write_text("import os\ndef parse_date(s):\n    pass\n")
    (workspace / "src" / "b.txt").write_text("Parse_Date in prose\n")
    assert search_files(ctx, "parse_date").splitlines() == [
        "src/a.py:2: def parse_date(s):",
        "src/b.txt:1: Parse_Date in prose",
    ]
    assert search_files(ctx, "parse_date", case_sensitive=True) == "src/a.py:2: def parse_date(s):"
    assert search_files(ctx, "parse", glob="*.txt") == "src/b.txt:1: Parse_Date in prose"
    assert search_files(ctx, r"^def \w+\(", regex=True) == "src/a.py:2: def parse_date(s):"
    assert search_files(ctx, "import", path="src/a.py") == "src/a.py:1: import os"
    # a regex character is literal unless regex is true
    assert search_files(ctx, "parse_date(") == "src/a.py:2: def parse_date(s):"
    assert search_files(ctx, "nothing here") == "no matches for 'nothing here'"
    with pytest.raises(ToolError, match="invalid regular expression"):
        search_files(ctx, "(", regex=True)


def test_search_files_stops_at_max_results(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "many.txt").write_text("hit\n" * 50)
    lines = search_files(ctx, "hit", max_results=3).splitlines()
    assert lines == ["many.txt:1: hit", "many.txt:2: hit", "many.txt:3: hit", lines[3]]
    assert "stopped at 3" in lines[3]


def test_search_files_skips_binary_git_and_caches(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "blob.bin").write_bytes(b"needle\x00\x01\x02")
    (workspace / ".git").mkdir()
    (workspace / ".git" / "COMMIT_EDITMSG").write_text("needle\n")
    (workspace / "node_modules" / "lib").mkdir(parents=True)
    (workspace / "node_modules" / "lib" / "x.js").write_text("needle\n")
    (workspace / "real.txt").write_text("needle\n")
    assert search_files(ctx, "needle") == "real.txt:1: needle"


def test_search_files_names_files_too_big_to_search(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "huge.log").write_text("needle\n" + "x" * 2_100_000)
    result = search_files(ctx, "needle")
    assert result.startswith("no matches for 'needle'")
    assert "huge.log" in result
    assert "read_file" in result


def test_search_files_does_not_hang_on_a_fifo(ctx: ToolContext, workspace: Path) -> None:
    """A named pipe in the workspace (a program can make one) must be skipped, not opened:
    opening it for reading blocks until someone writes."""
    fifo = workspace / "pipe"
    os.mkfifo(fifo)
    (workspace / "real.txt").write_text("needle\n")
    results: list[str] = []
    worker = threading.Thread(target=lambda: results.append(search_files(ctx, "needle")))
    worker.daemon = True
    worker.start()
    worker.join(timeout=15)
    if worker.is_alive():  # unblock the stuck reader before failing
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        worker.join(timeout=5)
        pytest.fail("search_files blocked on a FIFO")
    assert results == ["real.txt:1: needle"]


# --- escapes --------------------------------------------------------------------------------


def _escape_paths(workspace: Path, outside: Path) -> list[str]:
    """Every way we know to name the outside file or folder from inside the workspace."""
    (workspace / "file_link").symlink_to(outside / "secret.txt")
    (workspace / "dir_link").symlink_to(outside)
    (workspace / "sub").mkdir()
    (workspace / "sub" / "deep_link").symlink_to(outside)
    (workspace / "relative_link").symlink_to(Path("..") / "outside" / "secret.txt")
    return [
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        str(outside / "secret.txt"),
        "/etc/passwd",
        "~/.ssh/id_rsa",
        "~",
        "file_link",
        "relative_link",
        "dir_link/secret.txt",
        "sub/deep_link/secret.txt",
        "dir_link",
        "sub/deep_link/../outside/secret.txt",
        "secret.txt\x00.png",
        "..",
        "sub/..//../",
    ]


def test_read_file_refuses_every_escape(ctx: ToolContext, workspace: Path, outside: Path) -> None:
    for path in _escape_paths(workspace, outside):
        with pytest.raises(SandboxError) as info:
            read(ctx, path)
        assert SECRET not in str(info.value), path


def test_list_files_refuses_every_escape(ctx: ToolContext, workspace: Path, outside: Path) -> None:
    for path in _escape_paths(workspace, outside):
        with pytest.raises(SandboxError):
            list_files(ctx, path, recursive=True)


def test_search_files_refuses_every_escape(
    ctx: ToolContext, workspace: Path, outside: Path
) -> None:
    for path in _escape_paths(workspace, outside):
        with pytest.raises(SandboxError):
            search_files(ctx, "SECRET", path=path)


def test_write_file_refuses_every_escape(ctx: ToolContext, workspace: Path, outside: Path) -> None:
    before = files_in(outside)
    (workspace / "dangling").symlink_to(outside / "not-yet.txt")
    for path in [*_escape_paths(workspace, outside), "dangling", "dir_link/new.txt"]:
        with pytest.raises(SandboxError):
            write_file(ctx, path, "OVERWRITTEN")
    assert files_in(outside) == before
    assert not (outside / "not-yet.txt").exists()
    assert not (outside / "new.txt").exists()


def test_whole_workspace_listing_and_search_never_show_outside_content(
    ctx: ToolContext, workspace: Path, outside: Path
) -> None:
    _escape_paths(workspace, outside)
    (workspace / "mine.txt").write_text("SECRET is a word here too\n")
    listing = list_files(ctx, recursive=True)
    assert "secret.txt" not in listing  # the linked folder is not walked into
    assert "dir_link/" in listing  # but the link itself is visible
    found = search_files(ctx, "SECRET")
    assert found == "mine.txt:1: SECRET is a word here too"
    assert SECRET not in found


def test_each_call_finds_the_workspace_where_it_is_now(ctx: ToolContext, workspace: Path) -> None:
    """The workspace is opened afresh for each tool call, by its path: a workspace folder
    renamed and replaced mid-run is not written through, and where the folders around it are
    renamed, paths are still told relative to it."""
    (workspace / "a.txt").write_text("first\n")
    assert read(ctx, "a.txt") == "  1| first\n"
    moved = workspace.with_name("moved")
    workspace.rename(moved)
    workspace.mkdir()
    (workspace / "a.txt").write_text("second\n")
    assert read(ctx, "a.txt") == "  1| second\n"
    assert write_file(ctx, "b.txt", "new") == "wrote 3 bytes to b.txt"
    assert (workspace / "b.txt").exists() and not (moved / "b.txt").exists()
    # a folder above the workspace renamed, with a symlink where it was
    parent = workspace.parent
    renamed = parent.with_name(parent.name + "-renamed")
    parent.rename(renamed)
    parent.symlink_to(renamed)
    assert read(ctx, str(workspace / "a.txt")).endswith("  1| second\n")
    assert list_files(ctx) == "a.txt\nb.txt"
    assert write_file(ctx, "c/d.txt", "x") == "wrote 1 bytes to c/d.txt"


def test_symlink_loops_are_errors_not_crashes(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "loop").symlink_to("loop")
    (workspace / "a").symlink_to("b")
    (workspace / "b").symlink_to("a")
    (workspace / "f.txt").write_text("hit\n")
    for path in ("loop", "a"):
        with pytest.raises(ToolError):
            read(ctx, path)
        with pytest.raises(ToolError):
            write_file(ctx, path, "x")
    assert search_files(ctx, "hit") == "f.txt:1: hit"
    assert list_files(ctx).splitlines() == ["a", "b", "f.txt", "loop"]


def test_a_symlink_that_stays_inside_is_followed(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "real.txt").write_text("inside\n")
    (workspace / "alias.txt").symlink_to(workspace / "real.txt")
    assert text_of(read(ctx, "alias.txt")) == "inside\n"
    write_file(ctx, "alias.txt", "changed\n")
    assert (workspace / "real.txt").read_text() == "changed\n"


def test_a_workspace_reached_through_a_symlink_still_works(tmp_path: Path, outside: Path) -> None:
    real = tmp_path / "real_ws"
    real.mkdir()
    (real / "a.txt").write_text("a\n")
    linked = tmp_path / "ws_link"
    linked.symlink_to(real)
    ctx = ToolContext("t", linked, SandboxSettings())
    assert text_of(read(ctx, "a.txt")) == "a\n"
    assert list_files(ctx) == "a.txt"
    assert write_file(ctx, "b.txt", "b") == "wrote 1 bytes to b.txt"
    with pytest.raises(SandboxError):
        read(ctx, "../outside/secret.txt")


# --- as the model calls them ----------------------------------------------------------------


def test_refusals_reach_the_model_as_tool_errors_with_a_hint(
    ctx: ToolContext, workspace: Path, outside: Path
) -> None:
    tools = {t.spec.name: t for t in library_tools("read_file", "write_file")}

    def call(name: str, args: dict[str, object]) -> str:
        return asyncio.run(tools[name](args, ctx))

    with pytest.raises(SandboxError) as info:
        call("read_file", {"path": "../outside/secret.txt"})
    assert "outside the workspace" in info.value.message
    assert info.value.hint
    with pytest.raises(SandboxError) as info:
        call("write_file", {"path": "/tmp/x", "content": "x"})
    assert "absolute path" in info.value.message
    assert call("write_file", {"path": "ok.txt", "content": "fine"}) == "wrote 4 bytes to ok.txt"


def test_search_with_a_runaway_pattern_is_stopped_and_reported(
    ctx: ToolContext, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pattern that backtracks without end must come back as an error, not hang the run."""
    from fabric.infrastructure.tools import files

    monkeypatch.setattr(files, "_SEARCH_SECONDS", 0.3)
    (workspace / "a.txt").write_text("a" * 4000 + "!\n")
    with pytest.raises(ToolError) as info:
        search_files(ctx, r"(a+)+$", regex=True)
    assert "took longer than" in info.value.message
    assert "simpler pattern" in info.value.hint


def test_search_regex_and_case_options(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "a.py").write_text("def Parse_Date(x):\n    return x\n")
    assert "a.py:1:" in search_files(ctx, r"def \w+_date", regex=True)
    assert search_files(ctx, r"def \w+_date", regex=True, case_sensitive=True).startswith(
        "no matches"
    )
    assert "a.py:1:" in search_files(ctx, "parse_date(")  # literal: '(' is not special


def test_pack_authors_open_files_through_the_sdks_workspace(tmp_path: Path) -> None:
    """fabric.sdk.Workspace, as its docstring shows it: reads beneath the root, refuses
    host code and paths that lead out."""
    from fabric import sdk

    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "fabric.yaml").write_text("version: 1\n")
    ctx = sdk.ToolContext(
        "r", tmp_path, sdk.SandboxSettings(), read_only=(tmp_path / "fabric.yaml",)
    )
    with sdk.Workspace(ctx) as ws, ws.open("notes.txt") as opened:
        assert os.read(opened.fd, 100) == b"hello"
    with (
        pytest.raises(sdk.SandboxError, match="read-only for tools"),
        sdk.Workspace(ctx) as ws,
        ws.open_for_writing("fabric.yaml"),
    ):
        pass
    with (
        pytest.raises(sdk.SandboxError, match="outside the workspace"),
        sdk.Workspace(ctx) as ws,
        ws.open("../x"),
    ):
        pass
    assert (tmp_path / "fabric.yaml").read_text() == "version: 1\n"
