"""The ``edit_file`` tool: replace an exact snippet of a file, keeping everything else as it is.

Small models break files they rewrite whole; replacing one snippet keeps the rest byte for
byte, including the file's encoding (UTF-8 with or without BOM, UTF-16 with BOM, else
Latin-1) and its newline style. The file is read beneath the workspace root (``near_paths``
forgives a made-up ``workspace/`` prefix) and written back through the same
``Workspace.open_for_writing`` that write_file uses, with all its refusals (protected places,
host code, ``.git``, start-up files, symlinks out); it is checked to be the very file that was
read before anything is written.
"""

from __future__ import annotations

import codecs
import os
import stat

from fabric.application.context import ToolContext
from fabric.domain.errors import FabricError, ToolError

from .changes import Snapshot, note_change
from .near_paths import open_existing
from .snippets import SnippetNotFound, replace_snippet, without_numbers
from .walk import walk
from .workspace import Workspace

_MAX_EDIT_BYTES = 4_000_000
_HOLDERS_SHOWN = 3
_HOLDERS_LOOKED_AT = 2_000
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def edit_file(ctx: ToolContext, path: str, old: str, new: str, replace_all: bool = False) -> str:
    """Change part of an existing file: replace the exact text `old` with `new`. The rest of
    the file stays as it is. Copy `old` from the file as read_file shows it,
    WITHOUT the line numbers ("  12| " is not part of the file), with its exact indentation,
    and include enough lines that it appears only once.

    Args:
        path: File path relative to the workspace root, as list_files shows it.
        old: The exact text to replace, one or more whole lines copied from the file.
        new: The text to put in its place, indented like the file; empty to delete old.
        replace_all: Replace every place where old appears, not just one.
    """
    with Workspace(ctx) as ws:
        try:
            with open_existing(ws, ctx, path, "edit_file") as (file, note):
                rel = file.rel
                if not stat.S_ISREG(file.info.st_mode):
                    raise ToolError(f"{path!r} is not a file", hint="give the path of a file")
                if file.info.st_size > _MAX_EDIT_BYTES:
                    raise ToolError(
                        f"{rel} is {file.info.st_size:,} bytes, too big for edit_file "
                        f"(at most {_MAX_EDIT_BYTES:,})",
                        hint="change it with a program run through shell",
                    )
                data = _read_all(file.fd)
                read = (file.info.st_dev, file.info.st_ino)
        except OSError as exc:
            raise ToolError(f"cannot read {path!r}: {exc.strerror or exc}") from None
        bom, encoding, text = _decode(data, rel)
        try:
            edited = replace_snippet(text, old, new, replace_all=replace_all, path=rel)
        except SnippetNotFound:
            holders = _holders(ws, old, rel)
            if not holders:
                raise
            shown = ", ".join(f"{p} (line {n})" for p, n in holders)
            raise ToolError(
                f"old was not found in {rel}, but it is in {shown}",
                hint=f"if that is the file to change, call edit_file with path={holders[0][0]!r}",
            ) from None
        try:
            encoded = bom + edited.text.encode(encoding)
        except UnicodeEncodeError:
            raise ToolError(
                f"{rel} is {encoding}-encoded, and new holds characters that encoding cannot store",
                hint="write those characters another way (e.g. as an escape sequence)",
            ) from None
        try:
            # appending opens without emptying: the file is emptied only once it is known to
            # be the one read (a swap in between is refused, not written)
            with ws.open_for_writing(rel, append=True) as target:
                if (target.info.st_dev, target.info.st_ino) != read:
                    raise ToolError(
                        f"{rel} was replaced while it was being edited",
                        hint="read it again and repeat the edit",
                    )
                os.ftruncate(target.fd, 0)
                with open(target.fd, "wb", closefd=False) as fh:
                    fh.write(encoded)
        except OSError as exc:
            raise ToolError(f"cannot write {rel!r}: {exc.strerror or exc}") from None
        if ctx.changes is not None:
            note_change(ctx, rel, Snapshot.of(data), Snapshot.of(encoded))
    count = len(edited.regions)
    what = f"replaced {count} places" if count > 1 else "replaced 1 place"
    notes = f" ({edited.note})" if edited.note else ""
    return f"{note}edited {rel}: {what}{notes}. Now:\n{edited.view()}"


def _holders(ws: Workspace, old: str, rel: str) -> list[tuple[str, int]]:
    """Other workspace files that hold ``old`` exactly (line-number prefixes and surrounding
    blank lines aside), with the line it starts on: a small model often names the test file
    while copying the code under test. At most ``_HOLDERS_SHOWN``; big and binary files and
    files beyond ``_HOLDERS_LOOKED_AT`` are not looked at."""
    wanted = (without_numbers(old) or old).replace("\r\n", "\n").strip("\n")
    if not wanted.strip():
        return []
    found: list[tuple[str, int]] = []
    with ws.open(".") as root:
        for looked, path in enumerate(walk(ws, root, True, files_only=True)):
            if looked >= _HOLDERS_LOOKED_AT or len(found) >= _HOLDERS_SHOWN:
                break
            if path == rel:
                continue
            try:
                with ws.open(path) as file:
                    if not stat.S_ISREG(file.info.st_mode) or file.info.st_size > _MAX_EDIT_BYTES:
                        continue
                    data = os.pread(file.fd, _MAX_EDIT_BYTES, 0)
            except (FabricError, OSError):
                continue
            if b"\x00" in data:
                continue
            text = data.decode("utf-8", errors="replace").replace("\r\n", "\n")
            at = text.find(wanted)
            if at >= 0:
                found.append((path, text.count("\n", 0, at) + 1))
    return found


def _read_all(fd: int) -> bytes:
    with open(fd, "rb", closefd=False) as fh:
        data = fh.read(_MAX_EDIT_BYTES + 1)
    if len(data) > _MAX_EDIT_BYTES:
        raise ToolError(f"the file grew past {_MAX_EDIT_BYTES:,} bytes while being read")
    return data


def _decode(data: bytes, rel: str) -> tuple[bytes, str, str]:
    """The byte order mark, the encoding and the text of a file's ``data``."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return bom, encoding, data[len(bom) :].decode(encoding)
            except UnicodeDecodeError:
                break
    if b"\x00" in data:
        raise ToolError(
            f"{rel} looks binary; edit_file only changes text files",
            hint="leave binary files as they are, or rebuild them with a program through shell",
        )
    try:
        return b"", "utf-8", data.decode("utf-8")
    except UnicodeDecodeError:
        return b"", "latin-1", data.decode("latin-1")  # every byte stays what it was
