"""Probes against the host's files: writes and metadata changes outside the workspace,
remounts, kernel settings, and secrets (environment, home folder, protected folders)."""

from __future__ import annotations

import os
from pathlib import Path

from .lab import Lab, Verdict, changes, probe, state


@probe(
    "write outside",
    "escape",
    "create, overwrite, append to, rename into, delete and mkdir in a host folder outside the "
    "workspace (a folder the command can see); judged by the folder's state on the host",
)
async def write_outside(lab: Lab) -> Verdict:
    before = state(lab.outside)
    out = await lab.python(
        """
        t = ARGS[0]
        attempt("create", lambda: open(t + "/new.txt", "w").write("pwned"))
        attempt("overwrite", lambda: open(t + "/existing.txt", "w").write("pwned"))
        attempt("append", lambda: open(t + "/existing.txt", "a").write("pwned"))
        attempt("truncate", lambda: os.truncate(t + "/existing.txt", 0))
        attempt("mkdir", lambda: os.mkdir(t + "/newdir"))
        open("moved.txt", "w").write("pwned")
        attempt("rename in", lambda: os.rename("moved.txt", t + "/moved.txt"))
        attempt("delete", lambda: os.unlink(t + "/existing.txt"))
        """,
        lab.outside,
    )
    return lab.judge(out, changes(before, state(lab.outside)))


@probe(
    "write /dev/shm",
    "escape",
    "create a file in /dev/shm (shared memory: host programs keep POSIX shared memory and "
    "semaphores there); judged by the host's /dev/shm",
)
async def write_dev_shm(lab: Lab) -> Verdict:
    target = Path("/dev/shm") / f"{lab.token}-probe"
    out = await lab.python('attempt("create", lambda: open(ARGS[0], "w").write("pwned"))', target)
    try:
        return lab.judge(out, [f"{target} appeared on the host"] if target.exists() else [])
    finally:
        target.unlink(missing_ok=True)


@probe(
    "write via symlink",
    "escape",
    "write through symlinks to the outside folder: one the command makes, two planted in the "
    "workspace beforehand (to a file, to a folder), and /proc/self/root",
)
async def write_via_symlink(lab: Lab) -> Verdict:
    (lab.ws / "planted").symlink_to(lab.outside / "existing.txt")
    (lab.ws / "planted-dir").symlink_to(lab.outside)
    before = state(lab.outside)
    out = await lab.python(
        """
        t = ARGS[0]
        attempt("symlink", lambda: os.symlink(t, "link"))
        attempt("via new link", lambda: open("link/via-link.txt", "w").write("pwned"))
        attempt("via planted file", lambda: open("planted", "w").write("pwned"))
        attempt("via planted dir", lambda: open("planted-dir/via-planted.txt", "w").write("x"))
        attempt("via proc root", lambda: open("/proc/self/root" + t + "/via-proc.txt", "w"))
        """,
        lab.outside,
    )
    return lab.judge(out, changes(before, state(lab.outside)))


@probe(
    "write via hard link",
    "escape",
    "hard-link a host file into the workspace and write it; hard-link a workspace file out",
)
async def write_via_hard_link(lab: Lab) -> Verdict:
    before = state(lab.outside)
    out = await lab.python(
        """
        t = ARGS[0]
        attempt("link in", lambda: os.link(t + "/existing.txt", "hard.txt"))
        attempt("write via link", lambda: open("hard.txt", "r+").write("pwned"))
        open("mine.txt", "w").write("pwned")
        attempt("link out", lambda: os.link("mine.txt", t + "/linked-out.txt"))
        """,
        lab.outside,
    )
    return lab.judge(out, changes(before, state(lab.outside)))


@probe(
    "metadata outside",
    "escape",
    "chmod (setuid bit), chown, utime and setxattr on a host file and folder outside the "
    "workspace; judged by their mode, owner, times and attributes on the host",
)
async def metadata_outside(lab: Lab) -> Verdict:
    before = state(lab.outside)
    out = await lab.python(
        """
        t = ARGS[0]
        f = t + "/existing.txt"
        attempt("chmod", lambda: os.chmod(f, 0o4777))
        attempt("chmod folder", lambda: os.chmod(t, 0o777))
        attempt("chown", lambda: os.chown(f, 65534, 65534))
        attempt("utime", lambda: os.utime(f, (1, 1)))
        attempt("setxattr", lambda: os.setxattr(f, "user.fabric-probe", b"pwned"))
        """,
        lab.outside,
    )
    return lab.judge(out, changes(before, state(lab.outside)))


@probe(
    "remount /",
    "escape",
    "remount / read-write (and bind the outside folder over itself and remount that "
    "read-write), then write to the outside folder; judged by the folder and the host's mounts",
    unconfined=False,
)
async def remount_root(lab: Lab) -> Verdict:
    before, mounts = state(lab.outside), Path("/proc/self/mountinfo").read_text()
    out = await lab.python(
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        MS_REMOUNT, MS_BIND = 32, 4096
        def mount(src, dst, flags):
            if libc.mount(src, dst.encode(), None, flags, None) != 0:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        attempt("remount /", lambda: mount(None, "/", MS_REMOUNT | MS_BIND))
        attempt("bind", lambda: mount(ARGS[0].encode(), ARGS[0], MS_BIND))
        attempt("remount bind", lambda: mount(None, ARGS[0], MS_REMOUNT | MS_BIND))
        attempt("write", lambda: open(ARGS[0] + "/after-remount.txt", "w").write("pwned"))
        """,
        lab.outside,
    )
    found = changes(before, state(lab.outside))
    if Path("/proc/self/mountinfo").read_text() != mounts:
        found.append("the host's mount table changed")
    return lab.judge(out, found)


KNOB = Path("/proc/sys/kernel/printk_ratelimit")


@probe(
    "write /proc/sys",
    "escape",
    "write a harmless kernel setting (kernel.printk_ratelimit); judged by the host's value "
    "(restored if it changed)",
)
async def write_proc_sys(lab: Lab) -> Verdict:
    before = KNOB.read_text()
    out = await lab.python(
        """
        knob = ARGS[0]
        value = int(open(knob).read())
        attempt("write", lambda: open(knob, "w").write(str(value + 7)))
        """,
        KNOB,
    )
    after = KNOB.read_text()
    if after != before:
        KNOB.write_text(before)
        return lab.judge(out, [f"kernel.printk_ratelimit changed {before.strip()}->{after}"])
    return lab.judge(out, [])


@probe(
    "sysrq-trigger",
    "escape",
    "open /proc/sysrq-trigger for writing and send 'h' (help: harmless); judged by the "
    "host's kernel log (and, failing safe, by the command saying it opened the file)",
)
async def sysrq_trigger(lab: Lab) -> Verdict:
    kmsg = None
    try:
        kmsg = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(kmsg, 0, os.SEEK_END)
    except OSError:
        pass
    out = await lab.python(
        """
        def trigger():
            fd = os.open("/proc/sysrq-trigger", os.O_WRONLY)
            open("sysrq-opened", "w").close()
            os.write(fd, b"h")
        attempt("sysrq", trigger)
        """
    )
    found = []
    if kmsg is not None:
        records = []
        while True:
            try:
                records.append(os.read(kmsg, 8192))
            except BlockingIOError:
                break
            except OSError:  # EPIPE: a record was overwritten; go on
                continue
        os.close(kmsg)
        if any(b"sysrq" in r.lower() for r in records):
            found.append("the kernel log shows a SysRq request")
    if (lab.ws / "sysrq-opened").exists():
        found.append("/proc/sysrq-trigger opened for writing")
    absent = not Path("/proc/sysrq-trigger").exists()
    return lab.judge(out, found, "(this kernel has no /proc/sysrq-trigger)" if absent else "")
