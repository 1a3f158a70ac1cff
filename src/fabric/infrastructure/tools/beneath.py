"""Opening a path beneath a folder with no gap between resolving it and opening it.

A command in the workspace (the shell tool's) can swap a folder for a symlink at any moment.
Resolving a path first and opening it afterwards lets such a swap land in between, so here
the step that resolves is the step that opens:

* ``openat2(2)`` with ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS``: the kernel refuses, within
  the very call that opens, every step out of the folder ('..', a symlink pointing out,
  /proc magic links), whatever is swapped meanwhile.
* Where openat2 is missing, or refuses a symlink the walk may still accept (an absolute one
  that points back into the folder), a walk: one component at a time, each opened with
  ``O_NOFOLLOW`` on the folder fd of the one before; symlinks are read and resolved here, and
  any that leads out is refused.

Linux only (fabric's sandbox is too).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
from collections import deque
from collections.abc import Callable

_OPENAT2 = 437  # the same number on x86_64 and arm64
_RESOLVE_NO_MAGICLINKS, _RESOLVE_BENEATH = 0x02, 0x08
_WALK_DECIDES = {errno.EXDEV, errno.ELOOP, errno.EAGAIN, errno.ENOSYS, errno.EPERM, errno.EINVAL}
"""openat2 errors after which the walk decides: a step it refused (EXDEV: out, or an absolute
symlink; ELOOP: a magic link or a loop), a rename meanwhile (EAGAIN), no openat2 at all."""
_MAX_STEPS = 40
"""Symlinks followed (and folders created) per path at most, as the kernel's MAXSYMLINKS."""
DIRECTORY = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
"""Flags for a folder fd used only to reach what is below it."""


class LeadsOutside(Exception):
    """The path leaves the folder: '..' above it, or a symlink pointing out."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


@functools.cache
def _syscall() -> Callable[..., int] | None:
    if platform.machine().lower() not in {"x86_64", "amd64", "aarch64", "arm64"}:
        return None
    fn = ctypes.CDLL(None, use_errno=True).syscall  # a CDLL of our own: these types stay ours
    fn.restype = ctypes.c_long
    fn.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
    return fn


def _openat2(root_fd: int, rel: str, flags: int) -> int | None:
    """The fd, or None when the walk must decide (see ``_WALK_DECIDES``)."""
    syscall = _syscall()
    if syscall is None:
        return None
    how = _OpenHow(flags | os.O_CLOEXEC, 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
    fd = syscall(_OPENAT2, root_fd, os.fsencode(rel), ctypes.byref(how), ctypes.sizeof(how))
    if fd >= 0:
        return fd
    code = ctypes.get_errno()
    if code in _WALK_DECIDES:
        return None
    raise OSError(code, os.strerror(code), rel)


def open_beneath(root_fd: int, rel: str, flags: int) -> int:
    """Open ``rel`` (relative, '/'-separated) beneath the folder ``root_fd`` with ``flags``,
    following symlinks that stay beneath it. Raises LeadsOutside or OSError."""
    fd = _openat2(root_fd, rel, flags)
    if fd is not None:
        return fd
    for _ in range(_MAX_STEPS):
        dir_fd, name = find_beneath(root_fd, rel)
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:  # ELOOP, or ENOTDIR with O_DIRECTORY: a symlink swapped in
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR) or _link(dir_fd, name) is None:
                raise
        finally:
            os.close(dir_fd)
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), rel)


def find_beneath(
    root_fd: int, rel: str, make_folder: Callable[[int, str], None] | None = None
) -> tuple[int, str]:
    """The folder that holds what ``rel`` names, as an fd the caller closes, and its name
    there, which is no symlink (or nothing yet); '.' when ``rel`` names a folder itself.
    With ``make_folder``, missing folders on the way are created, each after
    ``make_folder(folder_fd, name)`` (which raises to refuse it)."""
    head, _, name = rel.rstrip("/").rpartition("/")
    if name not in ("", ".", ".."):  # the common case: the kernel finds the folder
        try:
            fd = _openat2(root_fd, head or ".", DIRECTORY)
        except FileNotFoundError:
            if make_folder is None:
                raise
            fd = None  # the walk makes what is missing
        if fd is not None:
            try:
                if _link(fd, name) is None:
                    return fd, name
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # a symlink: the walk resolves it
    return _walk(root_fd, rel, make_folder)


def _walk(
    root_fd: int, rel: str, make_folder: Callable[[int, str], None] | None
) -> tuple[int, str]:
    todo, chain, steps = deque(_parts(rel)), [os.dup(root_fd)], 0
    try:
        while todo:
            name = todo.popleft()
            if name == "..":
                if len(chain) == 1:
                    raise LeadsOutside(rel)
                os.close(chain.pop())
                continue
            if todo:  # a folder on the way
                try:
                    chain.append(os.open(name, DIRECTORY | os.O_NOFOLLOW, dir_fd=chain[-1]))
                    continue
                except FileNotFoundError:
                    if make_folder is None:
                        raise
                    make_folder(chain[-1], name)
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, dir_fd=chain[-1])
                    todo.appendleft(name)
                    target = None
                except OSError as exc:  # ELOOP or ENOTDIR: a symlink, or a file
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    target = _link(chain[-1], name)
                    if target is None:
                        raise
            else:  # the last name: no symlink, or resolve it too
                target = _link(chain[-1], name)
                if target is None:
                    return os.dup(chain[-1]), name
            steps += 1
            if steps > _MAX_STEPS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), rel)
            if target is not None:
                if target.startswith("/"):  # absolute: fine if it names a place beneath
                    target = _beneath_root(root_fd, target, rel)
                    for fd in chain[1:]:
                        os.close(fd)
                    del chain[1:]
                todo.extendleft(reversed(_parts(target)))
        return os.dup(chain[-1]), "."
    finally:
        for fd in chain:
            os.close(fd)


def _parts(rel: str) -> list[str]:
    return [part for part in rel.split("/") if part not in ("", ".")]


def _link(dir_fd: int, name: str) -> str | None:
    """The target of the symlink ``name`` in ``dir_fd``; None if it is no symlink (or gone)."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # not a symlink
            return None
        raise


def _beneath_root(root_fd: int, target: str, rel: str) -> str:
    """An absolute symlink target as a path relative to the root, if it lies beneath it."""
    root = real_path(root_fd).rstrip("/")
    if target == root or target.startswith(root + "/"):
        return target[len(root) :].lstrip("/") or "."
    raise LeadsOutside(rel)


def real_path(fd: int) -> str:
    """Where the file or folder open as ``fd`` is now, symlinks resolved (from /proc). The
    kernel gives it normalised already; ``os.readlink`` costs a tenth of ``Path.readlink``,
    and every file tool call asks several times."""
    return os.readlink(f"/proc/self/fd/{fd}")  # noqa: PTH115
