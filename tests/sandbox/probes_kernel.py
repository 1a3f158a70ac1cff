"""Probes for kernel features a command must not reach: io_uring (its operations pass by the
seccomp filter), new namespaces and mounts. Each program holds still after trying, while the
host looks at its open files, namespaces and mount table in /proc."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .host import token_pids
from .lab import Lab, Verdict, changes, probe, source, state
from .probes_proc import LIBC


@probe(
    "io_uring",
    "escape",
    "io_uring_setup (its operations would bypass the seccomp filter); judged on the host by "
    "the command's open files while it holds still",
)
async def io_uring(lab: Lab) -> Verdict:
    def look(pid: int) -> list[str]:
        links = []
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        return ["it holds an io_uring instance"] if any("io_uring" in x for x in links) else []

    out, found = await lab.held(
        source(
            LIBC,
            """
        params = ctypes.create_string_buffer(120)
        attempt("io_uring_setup", lambda: check(libc.syscall(425, 4, params)))
        hold()
        """,
        ),
        look=look,
    )
    return lab.judge(out, found)


def _namespaces(pid: int) -> dict[str, str]:
    found = {}
    for name in os.listdir(f"/proc/{pid}/ns"):
        with contextlib.suppress(OSError):
            found[name] = os.readlink(f"/proc/{pid}/ns/{name}")
    return found


@probe(
    "new namespaces",
    "escape",
    "unshare user, mount, net, pid, uts, ipc, cgroup and time namespaces (a child tries, "
    "then holds still); judged on the host by comparing /proc/<pid>/ns with the parent's",
)
async def namespaces(lab: Lab) -> Verdict:
    children: list[int] = []

    def look(pid: int) -> list[str]:
        """Only the child that tried: compared with its parent, the probe program (which may
        itself run in namespaces of the sandbox's own making)."""
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        if parent not in token_pids(lab.token, commands_only=True):
            return []
        children.append(pid)
        mine, theirs = _namespaces(pid), _namespaces(parent)
        return [f"a new {n} namespace" for n in sorted(mine) if mine[n] != theirs.get(n)]

    out, found = await lab.held(
        source(
            LIBC,
            """
        flags = {"user": 0x10000000, "mnt": 0x20000, "net": 0x40000000, "pid": 0x20000000,
                 "uts": 0x4000000, "ipc": 0x8000000, "cgroup": 0x2000000, "time": 0x80}
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # a new user namespace could leave it unable to touch the workspace
            for name, flag in flags.items():
                attempt("unshare " + name, lambda: check(libc.unshare(flag)))
            os.write(write, b"x")
            time.sleep(60)
            os._exit(0)
        os.read(read, 1)
        hold()
        os.kill(child, 9)
        """,
        ),
        look=look,
    )
    if not children and not found:
        found.append("the child that tried was not found on the host")
    return lab.judge(out, found)


@probe(
    "mount",
    "escape",
    "mount a tmpfs in the workspace and bind the outside folder into it to write there; "
    "judged by the command's mount table seen from the host, and the outside folder",
)
async def mount(lab: Lab) -> Verdict:
    before = state(lab.outside)

    def look(pid: int) -> list[str]:
        table = Path(f"/proc/{pid}/mountinfo").read_text()
        return [f"{m} was mounted" for m in ("mnt", "mnt2") if f" {lab.ws}/{m} " in table]

    out, found = await lab.held(
        source(
            LIBC,
            """
        def mount(source, target, fstype, flags):
            check(libc.mount(source, target.encode(), fstype, flags, None), "mount")
        os.mkdir("mnt")
        os.mkdir("mnt2")
        attempt("tmpfs", lambda: mount(b"tmpfs", "mnt", b"tmpfs", 0))
        attempt("bind", lambda: mount(ARGS[0].encode(), "mnt2", None, 4096))
        attempt("write via bind", lambda: open("mnt2/via-mount.txt", "w").write("pwned"))
        hold()
        """,
        ),
        lab.outside,
        look=look,
    )
    return lab.judge(out, found + changes(before, state(lab.outside)))
