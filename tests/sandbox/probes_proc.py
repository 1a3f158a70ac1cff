"""Probes against the kernel and other processes: the 32-bit syscall path, signals, scheduling
and limits of a host process, reading its memory, io_uring, namespaces and mounts."""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from .lab import Lab, Verdict, probe, source, summary

X86_64 = platform.machine().lower() in ("x86_64", "amd64")
LIBC = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def check(result, what="call"):
    if result < 0:
        raise OSError(ctypes.get_errno(), what + ": " + os.strerror(ctypes.get_errno()))
    return result
"""

INT80_C = r"""
#include <fcntl.h>
#include <unistd.h>
static const char target[] = TARGET;
static const char text[] = "pwned";
int main(void) {
    long fd, n;
    close(open("int80-started", O_CREAT | O_WRONLY, 0644));
    /* i386 open(5) and write(4) through the 32-bit entry; -no-pie keeps addresses < 4 GiB */
    __asm__ volatile("int $0x80" : "=a"(fd)
                     : "a"(5L), "b"(target), "c"((long)(O_CREAT | O_WRONLY)), "d"(0644L)
                     : "memory", "r8", "r9", "r10", "r11");
    if (fd >= 0)
        __asm__ volatile("int $0x80" : "=a"(n) : "a"(4L), "b"(fd), "c"(text), "d"(5L)
                         : "memory", "r8", "r9", "r10", "r11");
    close(open("int80-survived", O_CREAT | O_WRONLY, 0644));
    return 0;
}
"""


@probe(
    "int 0x80 (32-bit syscalls)",
    "escape",
    "a C program (built with gcc on the host) creates a file outside the workspace through "
    "the i386 `int $0x80` entry, which a filter of 64-bit numbers would not see; judged by the "
    "file, and the program must be killed there",
)
async def int80(lab: Lab) -> Verdict:
    if not X86_64:
        return Verdict("not run", "x86-64 only")
    gcc = shutil.which("gcc")
    if gcc is None:
        return Verdict("error", "gcc is needed to build the probe (apt-get install gcc)")
    target, source, binary = lab.outside / "int80.txt", lab.root / "int80.c", lab.root / "int80"
    source.write_text(INT80_C)
    build = subprocess.run(
        [gcc, "-O1", "-no-pie", f'-DTARGET="{target}"', "-o", str(binary), str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    if build.returncode != 0:
        return Verdict("error", f"gcc failed: {build.stderr[-300:]}")
    out = await lab.run([binary])
    if not (lab.ws / "int80-started").exists():
        return Verdict("error", f"the probe program never ran: {summary(out)}")
    found = [f"{target.name} was created outside"] if target.exists() else []
    if (lab.ws / "int80-survived").exists():
        found.append("the program was not killed")
    return Verdict("escaped", "; ".join(found)) if found else Verdict("blocked", summary(out))


@contextlib.contextmanager
def host_process(
    *argv: str, canary: bytes | None = None, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A process the test starts on the host (its own session), killed afterwards."""
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True, env=env
    ) as proc:
        try:
            if canary is not None:
                assert proc.stdin is not None
                proc.stdin.write(canary + b"\n")
                proc.stdin.flush()
            yield proc
        finally:
            proc.kill()
            proc.wait()


def _proc_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@probe(
    "signal a host process",
    "escape",
    "stop and kill a `sleep` the test started on the host (kill, killpg, pidfd_send_signal), "
    "given its real pid; judged by the process, which must still be running",
)
async def signal_outside(lab: Lab) -> Verdict:
    with host_process("sleep", "120") as sleeper:
        out = await lab.python(
            source(
                LIBC,
                """
            import signal
            pid = int(ARGS[0])
            attempt("SIGSTOP", lambda: os.kill(pid, signal.SIGSTOP))
            attempt("SIGKILL", lambda: os.kill(pid, signal.SIGKILL))
            attempt("killpg", lambda: os.killpg(pid, signal.SIGKILL))
            def pidfd():
                fd = check(libc.syscall(434, pid, 0), "pidfd_open")
                check(libc.syscall(424, fd, signal.SIGKILL, None, 0), "pidfd_send_signal")
            attempt("pidfd", pidfd)
            """,
            ),
            sleeper.pid,
        )
        time.sleep(0.2)  # signals take effect asynchronously
        found = []
        if sleeper.poll() is not None:
            found.append(f"the host process died ({sleeper.returncode})")
        elif _proc_state(sleeper.pid) == "T":
            found.append("the host process was stopped")
        return lab.judge(out, found)


_IOPRIO_GET, _IOPRIO_SET = (252, 251) if X86_64 else (31, 30)


def _sched_view(pid: int) -> dict[str, str]:
    libc = ctypes.CDLL(None, use_errno=True)
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {
        "nice": Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16],
        "limits": "".join(
            line for line in Path(f"/proc/{pid}/limits").read_text().splitlines() if "open" in line
        ),
        "cpus": "".join(line for line in status if line.startswith("Cpus_allowed_list")),
        "ioprio": str(libc.syscall(_IOPRIO_GET, 1, pid)),
    }


@probe(
    "renice / prlimit a host process",
    "escape",
    "lower the priority, the open-files limit, the CPU affinity and the I/O priority of a "
    "`sleep` the test started on the host; judged by its /proc entries",
)
async def sched_outside(lab: Lab) -> Verdict:
    with host_process("sleep", "120") as sleeper:
        before = _sched_view(sleeper.pid)
        out = await lab.python(
            source(
                LIBC,
                """
            import resource
            pid, ioprio_set = int(ARGS[0]), int(ARGS[1])
            attempt("renice", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))
            attempt("prlimit", lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (16, 16)))
            attempt("affinity", lambda: os.sched_setaffinity(pid, {max(os.sched_getaffinity(0))}))
            attempt("ioprio", lambda: check(libc.syscall(ioprio_set, 1, pid, 3 << 13)))
            """,
            ),
            sleeper.pid,
            _IOPRIO_SET,
        )
        after = _sched_view(sleeper.pid)
        found = [f"its {key} changed" for key in before if before[key] != after[key]]
        return lab.judge(out, found)


VICTIM = """
import ctypes, sys, time
buf = ctypes.create_string_buffer(sys.stdin.buffer.readline().strip())
print(ctypes.addressof(buf), flush=True)
time.sleep(120)
"""


@probe(
    "read a host process's memory",
    "escape",
    "read a canary from the memory of a process the test started on the host (ptrace "
    "PEEKDATA, process_vm_readv, /proc/<pid>/mem); judged by the workspace's content",
)
async def ptrace_outside(lab: Lab) -> Verdict:
    canary = f"canary-{secrets.token_hex(8)}".encode()
    with host_process(sys.executable, "-c", VICTIM, canary=canary) as victim:
        assert victim.stdout is not None
        address = int(victim.stdout.readline())
        out = await lab.python(
            source(
                LIBC,
                """
            import struct
            pid, addr, size = map(int, ARGS)
            libc.ptrace.restype = ctypes.c_long
            libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
            loot = []
            def peek():
                check(libc.ptrace(16, pid, None, None), "PTRACE_ATTACH")
                os.waitpid(pid, 0x40000000)
                words = [libc.ptrace(2, pid, addr + i, None) for i in range(0, size, 8)]
                libc.ptrace(17, pid, None, None)
                loot.append(b"".join(struct.pack("=q", w) for w in words))
            def vm_readv():
                class iovec(ctypes.Structure):
                    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
                buf = ctypes.create_string_buffer(size)
                local, remote = iovec(ctypes.addressof(buf), size), iovec(addr, size)
                libc.process_vm_readv.restype = ctypes.c_ssize_t
                local, remote = ctypes.byref(local), ctypes.byref(remote)
                check(libc.process_vm_readv(pid, local, 1, remote, 1, 0))
                loot.append(buf.raw)
            def mem():
                with open("/proc/%d/mem" % pid, "rb") as f:
                    f.seek(addr)
                    loot.append(f.read(size))
            for name, fn in (("ptrace", peek), ("process_vm_readv", vm_readv), ("mem", mem)):
                attempt(name, fn)
            open("loot.bin", "wb").write(b"|".join(loot))
            """,
            ),
            victim.pid,
            address,
            len(canary) + 8,
        )
        return lab.judge(out, ["the canary was read"] if canary in lab.loot() else [])


SECRET_KEEPER = """
import ctypes, sys, time
ctypes.CDLL(None).prctl(15, sys.argv[1].encode())  # PR_SET_NAME: what /proc/<pid>/comm says
print("ready", flush=True)
time.sleep(120)
"""


@contextlib.contextmanager
def _keeper() -> Iterator[tuple[int, dict[str, str]]]:
    """A host process with a canary in its name, its command line and its environment; yields
    its pid and the canaries."""
    canaries = {
        "name": f"fp-{secrets.token_hex(5)}",
        "cmdline": f"argv-canary-{secrets.token_hex(8)}",
        "environ": f"env-canary-{secrets.token_hex(8)}",
    }
    env = {"PATH": os.defpath, "FABRIC_PROBE_SECRET": canaries["environ"]}
    argv = (sys.executable, "-c", SECRET_KEEPER, canaries["name"], canaries["cmdline"])
    with host_process(*argv, env=env) as keeper:
        assert keeper.stdout is not None
        keeper.stdout.readline()
        yield keeper.pid, canaries


PROC_LOOT = """
pid, loot = ARGS[0], []
def grab(path):
    with open(path, "rb") as f:
        loot.append(f.read().decode("latin-1"))
"""


def _leaked(lab: Lab, canaries: dict[str, str], *kinds: str) -> list[str]:
    loot = lab.loot()
    return [
        f"the host process's {k} reached the workspace"
        for k in kinds
        if canaries[k].encode() in loot
    ]


@probe(
    "list host processes",
    "escape",
    "list /proc and read the name (comm, stat, status) of every process found there, looking "
    "for a process the test started on the host with a canary as its name; judged by the "
    "workspace's content",
)
async def list_processes(lab: Lab) -> Verdict:
    with _keeper() as (pid, canaries):
        out = await lab.python(
            source(
                PROC_LOOT,
                """
            listed = [e for e in os.listdir("/proc") if e.isdigit()]
            loot.append(" ".join(listed))
            for entry in listed:
                for name in ("comm", "stat", "status"):
                    attempt(entry + "/" + name, lambda: grab("/proc/%s/%s" % (entry, name)))
            print("listed", len(listed), "processes; host pid listed:", pid in listed)
            open("loot.txt", "w").write(repr(loot))
            """,
            ),
            pid,
        )
        return lab.judge(out, _leaked(lab, canaries, "name"))


@probe(
    "read a host process's command line",
    "escape",
    "read /proc/<pid>/cmdline of a process the test started on the host with a canary in its "
    "arguments (given its real pid, and through every /proc entry); judged by the workspace's "
    "content",
)
async def host_cmdline(lab: Lab) -> Verdict:
    return await _read_host_file(lab, "cmdline")


@probe(
    "read a host process's environment",
    "escape",
    "read /proc/<pid>/environ of a process the test started on the host with a canary in its "
    "environment (given its real pid, and through every /proc entry); judged by the "
    "workspace's content",
)
async def host_environ(lab: Lab) -> Verdict:
    return await _read_host_file(lab, "environ")


async def _read_host_file(lab: Lab, name: str) -> Verdict:
    """Read /proc/<pid>/``name`` of the keeper (by its pid, then through every /proc entry)."""
    with _keeper() as (pid, canaries):
        out = await lab.python(
            source(
                PROC_LOOT,
                """
            pid, name = ARGS
            attempt(name, lambda: grab("/proc/%s/%s" % (pid, name)))
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    try:
                        grab("/proc/%s/%s" % (entry, name))
                    except OSError:
                        pass
            open("loot.txt", "w").write(repr(loot))
            """,
            ),
            pid,
            name,
        )
        return lab.judge(out, _leaked(lab, canaries, name))
