"""What a confined command sees: the bubblewrap arguments and the Landlock rules.

Both backends give the same picture where they can: the host read-only, the workspace the only
writable place besides a private temporary folder, fabric's protected folders (the runs
folder, the service's files) and the usual credential files in the home folder out of sight.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from fabric.infrastructure.packs.git_repos import inside

from .host_code import pins

SECRET_HOME_ENTRIES = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".config/fabric",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".pypirc",
    ".npmrc",
    ".cargo/credentials.toml",
    ".local/share/keyrings",
)
"""Credential stores under the home folder, hidden from commands when they exist."""

_PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
"""Kernel settings under /proc that root could write even without capabilities (files owned
by root and writable by their owner)."""


def hidden_paths(protected: Iterable[Path], home: str | None = None) -> list[Path]:
    """Existing places a command must not see: ``protected`` plus credential files, as real
    paths. A credential store that is a symlink (a dotfiles manager's ``~/.ssh``) is hidden
    where it leads: the link alone would keep nothing from a command that follows it, and
    bubblewrap cannot cover a link to a folder with a file."""
    home = home if home is not None else os.environ.get("HOME", "")
    places = list(protected)
    if home and Path(home).is_absolute():
        places += [Path(home) / entry for entry in SECRET_HOME_ENTRIES]
    return sorted({path.resolve() for path in places if path.exists()})


_PRIVATE = ("/tmp", "/run", "/var/tmp", "/dev/shm")
"""Host folders a bubblewrap sandbox gets empty ones of its own in place of."""


def bwrap_args(
    bwrap: str,
    *,
    workspace: Path,
    hidden: Sequence[Path],
    network: bool,
    command: Sequence[str],
    programs: Sequence[str] = (),
    read_only: Sequence[Path] = (),
    seccomp_fd: str = "{seccomp_fd}",
    chdir: Path | None = None,
    readable: Sequence[Path] = (),
) -> list[str]:
    """The bubblewrap command line: read-only host, private /tmp, /run, /var/tmp and
    /dev/shm, the workspace bound read-write, hidden paths covered, new namespaces (the
    network's too unless allowed), no capabilities, the seccomp filter, and death with fabric.

    ``programs`` (the command's executable and its PATH folders) stay visible, read-only,
    where they lie in one of the private folders: a virtual environment under /tmp, say.
    ``read_only`` paths inside the workspace (host code, see ``host_code.py``) are bound
    read-only, and the folders between them and the workspace onto themselves (pinned).
    ``chdir``: where the command starts (default: the workspace), e.g. an MCP server's own
    folder. ``readable``: folders outside the workspace the command may read wherever they
    are, one of the private folders included (the configured skill folders), bound
    read-only; hidden paths below them stay covered."""
    args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for name in _PROC_READ_ONLY:
        if Path("/proc", name).exists():
            args += ["--ro-bind", f"/proc/{name}", f"/proc/{name}"]
    for place in _PRIVATE:
        if place == "/dev/shm" or Path(place).is_dir():
            args += ["--tmpfs", place]
    for folder in _exposed(programs, workspace):
        args += ["--ro-bind", folder, folder]
    for path in readable:
        if not inside(path, workspace) and path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    args += ["--bind", str(workspace), str(workspace)]
    for pinned in pins(read_only, workspace):
        args += ["--bind", str(pinned), str(pinned)]
    for path in read_only:
        args += ["--ro-bind", str(path), str(path)]
    for path in hidden:
        args += _cover(path)
    args += ["--chdir", str(chdir or workspace), "--unshare-all"]
    if network:
        args.append("--share-net")
    args += [
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--setenv",
        "TMPDIR",
        "/tmp",
        "--seccomp",
        seccomp_fd,
        "--",
        *command,
    ]
    return args


def _exposed(programs: Sequence[str], workspace: Path) -> list[str]:
    """The folders to bind back for ``programs`` that lie under a private folder: the
    folder holding the program's folder (a venv's root for ``.venv/bin/python``), or the
    program's folder itself when that is directly in the private one."""
    found: dict[str, None] = {}
    for program in programs:
        path = Path(program)
        if not path.is_absolute():
            continue
        folder = path if path.is_dir() else path.parent
        for private in _PRIVATE:
            root = Path(private)
            if root not in folder.parents:
                continue
            keep = folder.parent if folder.parent != root else folder
            if keep.is_dir() and keep != workspace and workspace not in keep.parents:
                found[str(keep)] = None
    return list(found)


def _cover(path: Path) -> list[str]:
    if path.is_dir() and not path.is_symlink():
        return ["--tmpfs", str(path), "--remount-ro", str(path)]
    return ["--ro-bind", "/dev/null", str(path)]


def landlock_rules(
    *, workspace: Path, temp: Path, hidden: Sequence[Path], network: bool
) -> dict[str, object]:
    """Landlock grants: read and execute everywhere except the hidden paths (real paths, as
    ``hidden_paths`` gives them; their parent folders are then granted child by child, so they
    stay unlistable themselves, and no symlink is granted), write to the workspace, the
    private temp folder and /dev/shm (POSIX semaphores), and /dev/null. Every path is a real
    one: the launcher grants none that has become a link since (``confine.landlock._add_rule``)."""
    read = _read_grants(Path("/"), [p for p in hidden if not inside(p, workspace)])
    return {
        "read": [str(p) for p in read],
        "write": [os.path.realpath(p) for p in (workspace, temp, "/dev/shm")],
        "write_files": [os.path.realpath("/dev/null")],
        "network": network,
    }


def _read_grants(root: Path, hidden: Sequence[Path]) -> list[Path]:
    """Everything under ``root`` but the ``hidden`` real paths: the children of each folder on
    the way to one, never a symlink. Landlock grants what a rule's path leads to, so a granted
    link to a hidden place, to a folder on the way to one or to ``/`` would open it; a link is
    followed inside the sandbox anyway, and what it leads to is readable where that lies (or
    not, when hidden). The launcher grants each path only if it is still the one listed here
    (``confine.landlock.apply_landlock``): no link put on the way since counts either."""
    if not hidden:
        return [root]
    grants: list[Path] = []
    try:
        children = sorted(root.iterdir())
    except OSError:
        return grants
    for child in children:
        if child.is_symlink():
            continue
        below = [h for h in hidden if inside(h, child)]
        if any(h == child for h in below):
            continue
        if below and child.is_dir():
            grants += _read_grants(child, below)
        else:
            grants.append(child)
    return grants
