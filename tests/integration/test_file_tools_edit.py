"""edit_file, numbered reads and made-up paths on real files: what a small model sees when it
edits a file, gets a snippet slightly wrong, or invents a path; and that edit_file is held to
every rule write_file is held to."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated, Any

import pytest

from fabric.application.context import ToolContext
from fabric.config.policy import PolicyRule, PolicySettings
from fabric.config.schema import SandboxSettings
from fabric.domain.errors import SandboxError, ToolError
from fabric.infrastructure.tools import beneath
from fabric.infrastructure.tools.edit import edit_file
from fabric.infrastructure.tools.files import list_files, read_file, write_file
from fabric.infrastructure.tools.function_tool import PACK_SETTING, FunctionTool
from fabric.infrastructure.tools.library import library_tools

CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"


@pytest.fixture(autouse=True, params=["openat2", "walk"])
def opener(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs with paths opened by openat2(2), and by the walk used without it."""
    if request.param == "walk":
        monkeypatch.setattr(beneath, "_syscall", lambda: None)
    return str(request.param)


@pytest.fixture
def calc(workspace: Path) -> Path:
    (workspace / "src").mkdir()
    path = workspace / "src" / "calc.py"
    path.write_text(CALC)
    return path


def read(ctx: ToolContext, path: str, **options: Any) -> str:
    return asyncio.run(read_file(ctx, path, **options))


def error_of(call: Any, *args: Any, **kwargs: Any) -> ToolError:
    with pytest.raises(ToolError) as info:
        result = call(*args, **kwargs)
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    return info.value


def files_in(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


# --- replacing ------------------------------------------------------------------------------


def test_an_exact_snippet_is_replaced_and_the_changed_lines_are_shown(
    ctx: ToolContext, calc: Path
) -> None:
    old, new = "def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b"
    result = edit_file(ctx, "src/calc.py", old, new)
    assert calc.read_text() == CALC.replace(old, new)
    assert result.startswith("edited src/calc.py: replaced 1 place. Now:\n")
    assert "  2|     return a + b\n" in result
    assert "  5| def sub(a, b):" in result  # three lines of context below the change
    assert "  6|" not in result


def test_a_missing_snippet_names_the_most_similar_lines(ctx: ToolContext, calc: Path) -> None:
    error = error_of(edit_file, ctx, "src/calc.py", "def sub(a, c):\n    return a - c", "x")
    assert error.message.startswith("old was not found in src/calc.py. The most similar part")
    assert "lines 5-6" in error.message
    assert "  5| def sub(a, b):\n  6|     return a - b" in error.message
    assert "without the line-number prefixes" in error.hint
    assert calc.read_text() == CALC


def test_a_snippet_with_other_indentation_is_pointed_at_not_applied(
    ctx: ToolContext, calc: Path
) -> None:
    error = error_of(edit_file, ctx, "src/calc.py", "def sub(a, b):\nreturn a - b", "x")
    assert "the snippet matches if indentation/trailing spaces are ignored" in error.message
    assert "at lines 5-6" in error.message
    assert "  6|     return a - b" in error.message  # the exact text to copy
    assert calc.read_text() == CALC


def test_a_snippet_copied_at_another_depth_is_moved_to_the_files_depth(
    ctx: ToolContext, workspace: Path
) -> None:
    """The model drops the method's indentation in old and new alike: one consistent shift,
    one place, so the edit is made at the file's depth and the note says so."""
    (workspace / "shop.py").write_text(
        "class Cart:\n    def total(self):\n        cost = self.net\n        return cost\n"
    )
    result = edit_file(
        ctx, "shop.py", "cost = self.net\nreturn cost", "cost = self.net\nreturn cost * 2"
    )
    assert (workspace / "shop.py").read_text() == (
        "class Cart:\n    def total(self):\n        cost = self.net\n        return cost * 2\n"
    )
    assert "old matched at another indentation; new was indented to match" in result
    # the same text at another depth is no change: said, not reported as an edit
    same = "        cost = self.net"
    error = error_of(edit_file, ctx, "shop.py", same.strip(), same.strip())
    assert error.message == "old and new are the same text, so nothing would change"
    error = error_of(edit_file, ctx, "shop.py", "    " + same, "    " + same)
    assert error.message == "old and new are the same text, so nothing would change"
    # new less indented than the shift takes off is not guessed at
    error = error_of(edit_file, ctx, "shop.py", "            return cost * 2", "return 0")
    assert "matches if indentation/trailing spaces are ignored" in error.message


def test_a_snippet_that_is_in_another_file_names_that_file(
    ctx: ToolContext, workspace: Path
) -> None:
    """A small model names the test file while copying the code under test."""
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_calc.py").write_text("from calc import add\n")
    (workspace / "calc.py").write_text(CALC)
    error = error_of(edit_file, ctx, "tests/test_calc.py", "def sub(a, b):\n    return a - b", "x")
    assert error.message == (
        "old was not found in tests/test_calc.py, but it is in calc.py (line 5)"
    )
    assert "path='calc.py'" in error.hint
    assert (workspace / "calc.py").read_text() == CALC


def test_trailing_spaces_alone_do_not_stop_an_edit(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "a.py").write_text("x = 1   \ny = 2\n")
    result = edit_file(ctx, "a.py", "x = 1\ny = 2\n", "x = 10\ny = 20\n")
    assert (workspace / "a.py").read_text() == "x = 10\ny = 20\n"
    assert "trailing spaces were ignored" in result


def test_several_matches_are_listed_by_line_and_replace_all_changes_them_all(
    ctx: ToolContext, calc: Path
) -> None:
    error = error_of(edit_file, ctx, "src/calc.py", "    return a - b", "    return 0")
    assert error.message == "old appears 2 times in src/calc.py (at lines 2, 6)"
    assert "replace_all" in error.hint
    assert calc.read_text() == CALC
    result = edit_file(ctx, "src/calc.py", "a - b", "b - a", replace_all=True)
    assert calc.read_text() == CALC.replace("a - b", "b - a")
    assert "replaced 2 places" in result
    assert "  2|     return b - a" in result and "  6|     return b - a" in result


def test_line_number_prefixes_copied_from_read_file_are_taken_out(
    ctx: ToolContext, calc: Path
) -> None:
    shown = read(ctx, "src/calc.py", start_line=5)
    assert shown == "  5| def sub(a, b):\n  6|     return a - b\n"
    result = edit_file(ctx, "src/calc.py", shown, shown.replace("a - b", "a * b"))
    assert calc.read_text() == CALC[: CALC.rindex("a - b")] + "a * b\n"
    assert "line-number prefixes" in result


def test_repeating_an_edit_that_was_made_says_so(ctx: ToolContext, calc: Path) -> None:
    old, new = "def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b"
    edit_file(ctx, "src/calc.py", old, new)
    error = error_of(edit_file, ctx, "src/calc.py", old, new)
    assert "the text of new is already there (line 1)" in error.message
    assert "looks made already" in error.message


def test_empty_or_unchanged_snippets_are_refused(ctx: ToolContext, calc: Path) -> None:
    assert "old is empty" in error_of(edit_file, ctx, "src/calc.py", "", "x").message
    same = error_of(edit_file, ctx, "src/calc.py", "def add", "def add")
    assert "nothing would change" in same.message
    assert calc.read_text() == CALC


# --- what the file is made of stays ---------------------------------------------------------


def test_crlf_line_ends_bom_and_latin1_are_kept(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "win.py").write_bytes(b"x = 1\r\ny = 2\r\n")
    edit_file(ctx, "win.py", "y = 2\n", "y = 3\nz = 4\n")
    assert (workspace / "win.py").read_bytes() == b"x = 1\r\ny = 3\r\nz = 4\r\n"
    (workspace / "bom.txt").write_bytes(b"\xef\xbb\xbfname = caf\xc3\xa9\n")
    edit_file(ctx, "bom.txt", "café", "thé")
    assert (workspace / "bom.txt").read_bytes() == b"\xef\xbb\xbfname = th\xc3\xa9\n"
    (workspace / "old.txt").write_bytes(b"caf\xe9 = 1\nx = 2\n")  # Latin-1, not UTF-8
    edit_file(ctx, "old.txt", "x = 2", "x = 3")
    assert (workspace / "old.txt").read_bytes() == b"caf\xe9 = 1\nx = 3\n"
    (workspace / "utf16.txt").write_bytes(b"\xff\xfe" + "a = 1\n".encode("utf-16-le"))
    edit_file(ctx, "utf16.txt", "a = 1", "a = 2")
    assert (workspace / "utf16.txt").read_bytes() == b"\xff\xfe" + "a = 2\n".encode("utf-16-le")


def test_binary_files_folders_and_missing_files_are_refused(
    ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00x")
    assert "looks binary" in error_of(edit_file, ctx, "img.png", "x", "y").message
    assert (workspace / "img.png").read_bytes() == b"\x89PNG\r\n\x1a\n\x00\x00x"
    (workspace / "dir").mkdir()
    assert "not a file" in error_of(edit_file, ctx, "dir", "x", "y").message
    missing = error_of(edit_file, ctx, "nope.py", "x", "y")
    assert missing.message == "there is no file 'nope.py' in the workspace root"
    # the embedded model tried to create src/hello.py with edit_file (old="") several times
    assert "to create a new file, call write_file" in missing.hint


# --- the same refusals as write_file --------------------------------------------------------


def test_host_code_git_and_protected_places_are_not_edited(workspace: Path) -> None:
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (workspace / "fabric.yaml").write_text("packs: {}\n")
    (workspace / "lib.pth").write_text("import os\n")
    (workspace / "env").mkdir()
    (workspace / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    (workspace / "env" / "site.py").write_text("x = 1\n")
    runs = workspace / "runs"
    runs.mkdir()
    (runs / "runlog.jsonl").write_text("{}\n")
    ctx = ToolContext(
        "t",
        workspace,
        SandboxSettings(),
        protected=(runs.resolve(),),
        read_only=((workspace / "fabric.yaml").resolve(),),
    )
    before = files_in(workspace)
    for path, old, why in [
        (".git/config", "false", r"\.git"),
        ("fabric.yaml", "{}", "read-only for tools"),
        ("lib.pth", "os", "start-up"),
        ("env/site.py", "1", "virtualenv"),
        ("runs/runlog.jsonl", "{}", "protected"),
    ]:
        with pytest.raises(SandboxError, match=why):
            edit_file(ctx, path, old, "PWNED")
    assert files_in(workspace) == before


def test_a_symlink_pointing_out_of_the_workspace_is_refused(
    ctx: ToolContext, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    (workspace / "dir_link").symlink_to(outside)
    for path in ("link.txt", "dir_link/secret.txt", "../outside/secret.txt", str(outside)):
        with pytest.raises(SandboxError) as info:
            edit_file(ctx, path, "TOP SECRET", "changed")
        assert "TOP SECRET" not in str(info.value)
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"


def test_a_symlink_that_stays_inside_edits_its_target(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "real.txt").write_text("a = 1\n")
    (workspace / "alias.txt").symlink_to("real.txt")
    assert edit_file(ctx, "alias.txt", "a = 1", "a = 2").startswith("edited real.txt")
    assert (workspace / "real.txt").read_text() == "a = 2\n"
    assert (workspace / "alias.txt").is_symlink()


# --- paths a small model invents ------------------------------------------------------------


@pytest.mark.parametrize("given", ["workspace/src/calc.py", "ws/src/calc.py", "{root}/src/calc.py"])
def test_a_made_up_prefix_or_absolute_path_reaches_the_file_meant(
    ctx: ToolContext, calc: Path, workspace: Path, given: str
) -> None:
    path = given.format(root=workspace)
    shown = read(ctx, path)
    assert shown.startswith(f"[{path!r} is not a path in the workspace; used 'src/calc.py'")
    assert "  2|     return a - b" in shown
    result = edit_file(
        ctx, path, "def add(a, b):\n    return a - b", "def add(a, b):\n    return 0"
    )
    assert "edited src/calc.py" in result
    assert calc.read_text().startswith("def add(a, b):\n    return 0\n")
    assert not (workspace / "workspace").exists()


def test_listing_a_made_up_workspace_folder_lists_the_root(
    ctx: ToolContext, calc: Path, workspace: Path
) -> None:
    for path in ("workspace", "workspace/src", str(workspace)):
        listed = list_files(ctx, path).splitlines()
        assert listed[0].startswith(f"[{path!r} is not a path in the workspace; used ")
        assert listed[1:] == (["src/calc.py"] if path.endswith("src") else ["src/"])
    with pytest.raises(ToolError, match="is not a folder"):
        list_files(ctx, "workspace/nothing")


def test_a_wrong_folder_gets_the_closest_existing_paths(ctx: ToolContext, calc: Path) -> None:
    error = error_of(read_file, ctx, "calc.py")
    assert error.message == (
        "there is no file 'calc.py' in the workspace root; did you mean 'src/calc.py'?"
    )
    error = error_of(edit_file, ctx, "workspace/fabric/calc.py", "a", "b")
    assert "there is no folder 'workspace/fabric'" in error.message
    assert "did you mean 'src/calc.py'?" in error.message
    assert "paths are relative to the workspace root" in error.hint


def test_a_corrected_path_still_answers_to_the_policy(workspace: Path) -> None:
    """A deny rule on the real path must not be sidestepped by a made-up spelling of it."""
    (workspace / "secret").mkdir()
    (workspace / "secret" / "key.txt").write_text("KEY-MATERIAL\n")
    rules = [PolicyRule(tool="read_file", path="secret/**", verdict="deny")]
    sandbox = SandboxSettings(policy=PolicySettings(rules=rules))
    ctx = ToolContext("t", workspace, sandbox)
    for path in ("workspace/secret/key.txt", str(workspace / "secret" / "key.txt")):
        error = error_of(read_file, ctx, path)
        assert "KEY-MATERIAL" not in str(error)
        assert "path='secret/key.txt'" in error.hint  # the model asks again, the policy decides


def test_write_file_refuses_a_made_up_workspace_folder_with_a_hint(
    ctx: ToolContext, workspace: Path
) -> None:
    error = error_of(write_file, ctx, "workspace/hello.py", "print('hi')\n")
    assert "the workspace has no folder 'workspace'" in error.message
    assert "write to 'hello.py' instead" in error.hint
    with pytest.raises(SandboxError) as info:
        write_file(ctx, str(workspace / "hello.py"), "x")
    assert info.value.hint == "write to 'hello.py'"
    assert list(workspace.iterdir()) == []
    # a folder that really has the name is an ordinary path, and './' says it is meant
    assert write_file(ctx, "./workspace/a.txt", "a") == "wrote 1 bytes to workspace/a.txt"
    assert write_file(ctx, "workspace/b.txt", "b") == "wrote 1 bytes to workspace/b.txt"


def test_writing_the_same_text_again_says_nothing_changed(
    ctx: ToolContext, workspace: Path
) -> None:
    assert write_file(ctx, "a.py", "x = 1\n") == "wrote 6 bytes to a.py"
    again = write_file(ctx, "a.py", "x = 1\n")
    assert again == "wrote 6 bytes to a.py: no change, the file already held exactly this text"


# --- as the model calls it ------------------------------------------------------------------


def test_edit_file_is_a_library_tool_with_a_small_model_description(
    ctx: ToolContext, calc: Path
) -> None:
    (tool,) = library_tools("edit_file")
    assert tool.spec.name == "edit_file"
    assert "WITHOUT the line numbers" in tool.spec.description
    assert "Example" not in tool.spec.description  # the small model copied the example
    assert tool.spec.parameters["required"] == ["path", "old", "new"]
    args = {"path": "src/calc.py", "old": "    return a - b\n\n\n", "new": "    return a + b\n\n\n"}
    result = asyncio.run(tool(args, ctx))
    assert result.startswith("edited src/calc.py")
    assert calc.read_text().startswith("def add(a, b):\n    return a + b\n")
    assert os.stat(calc).st_size == len(CALC)


def test_a_pack_can_keep_write_file_from_replacing_files(ctx: ToolContext, workspace: Path) -> None:
    """The engineering pack binds replace_files=False: a small model wrote one line over a
    whole module. New files, empty files and appends still work; the model's schema is the
    same as everywhere (the setting is the pack's, never the model's)."""
    (tool,) = library_tools("write_file", bind={"replace_files": False})
    (plain,) = library_tools("write_file")
    assert tool.spec == plain.spec and "replace_files" not in str(tool.spec.parameters)
    (workspace / "cart.py").write_text("class Cart:\n    pass\n")
    error = error_of(tool, {"path": "cart.py", "content": "x = 1\n"}, ctx)
    assert error.message.startswith("cart.py already exists (2 lines): in this pack write_file")
    assert "change cart.py with edit_file" in error.hint
    assert (workspace / "cart.py").read_text() == "class Cart:\n    pass\n"
    assert asyncio.run(tool({"path": "new.py", "content": "y = 2\n"}, ctx)).startswith("wrote")
    (workspace / "empty.py").write_text("")
    assert asyncio.run(tool({"path": "empty.py", "content": "z = 3\n"}, ctx)).startswith("wrote")
    grown = asyncio.run(tool({"path": "cart.py", "content": "# end\n", "append": True}, ctx))
    assert grown.startswith("appended") and (workspace / "cart.py").read_text().endswith("# end\n")
    # without the pack's setting write_file replaces, as before
    assert asyncio.run(plain({"path": "new.py", "content": "w = 4\n"}, ctx)).startswith("wrote")


def test_a_pack_setting_needs_a_default() -> None:
    def tool(ctx: ToolContext, path: str, strict: Annotated[bool, PACK_SETTING]) -> str:
        """A tool.

        Args:
            path: A path.
        """
        return path

    with pytest.raises(TypeError, match="pack setting strict needs a default"):
        FunctionTool(tool)
