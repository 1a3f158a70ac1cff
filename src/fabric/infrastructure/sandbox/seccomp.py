"""The seccomp filter every confined command runs under, as a classic BPF program.

The filter is built here, in fabric's process, and handed to bubblewrap (``--seccomp FD``) or to
the launcher (Landlock backend), which installs it just before the command starts. It is small
enough to read in full:

- a foreign architecture is killed: on x86-64 this is the 32-bit ``int 0x80`` path (its calls
  arrive as i386 and would slip past a table of 64-bit numbers), and the x32 ABI;
- calls that reach into the kernel or other processes are refused with EPERM: ptrace,
  process memory access, taking another process's file descriptors (``pidfd_getfd``), every
  mount call, namespace creation (``unshare``, ``setns``, clone with a namespace flag;
  ``clone3`` answers ENOSYS so the C library falls back to ``clone``), io_uring, BPF, perf,
  userfaultfd, keyrings, modules, kexec, reboot, swap, quotas, syslog, file handles, and the
  terminal-injection ioctls;
- calls that change another process's limits, CPU affinity or priority work only on the
  caller itself;
- sockets: with the network off only unix sockets, with it on IPv4 and IPv6 too; every other
  family (netlink, packet, vsock, ...) is refused (EAFNOSUPPORT);
- no unix socket outside the sandbox can be reached, with the network off or on. A read-only
  mount does not stop ``connect`` or ``sendto`` to a socket file, and the filter cannot read
  an address behind a pointer (``connect``, ``sendto``, ``msg_name`` inside ``sendmsg``), so
  the command never holds a unix socket that could be pointed at one (EACCES): no datagram
  socket (``SOCK_DGRAM``, or ``SOCK_RAW``, which the kernel turns into one), from ``socket``
  or from ``socketpair`` (a datagram pair still sends wherever it is told). Stream and
  seqpacket pairs work: they are connected already, ``connect`` on them fails, and the kernel
  refuses or ignores a destination on them. With the network off, unconnected stream and
  seqpacket unix sockets may be made (to listen on) but ``connect`` is refused; with it on,
  TCP needs ``connect``, so ``socket`` refuses unix sockets altogether.

Written by hand rather than with libseccomp: the program is about ninety instructions, and this
keeps the launcher free of native dependencies (ADR 0012).
"""

from __future__ import annotations

import platform
import struct

from msgspec import Struct

# struct seccomp_data: nr (u32), arch (u32), instruction_pointer (u64), args[6] (u64 each)
_NR, _ARCH, _ARGS = 0, 4, 16

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45  # BPF_JMP | BPF_{JEQ,JGE,JSET} | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALU_AND_K = 0x54  # BPF_ALU | BPF_AND | BPF_K

_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000
_ALLOW = 0x7FFF0000
_EPERM, _EACCES, _ENOSYS, _EAFNOSUPPORT = 1, 13, 38, 97

_X32_BIT = 0x40000000
_AF_UNIX, _AF_INET, _AF_INET6 = 1, 2, 10
_SOCK_STREAM, _SOCK_SEQPACKET, _SOCK_TYPE_MASK = 1, 5, 0xF  # flags sit above the mask
_NAMESPACE_FLAGS = 0x7E020080  # CLONE_NEW{NS,CGROUP,UTS,IPC,USER,PID,NET,TIME}
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C

_DENIED = [
    *("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd"),
    *("unshare", "setns", "chroot"),
    *("mount", "umount2", "pivot_root", "move_mount", "open_tree", "mount_setattr"),
    *("fsopen", "fsconfig", "fsmount", "fspick"),
    *("io_uring_setup", "io_uring_enter", "io_uring_register"),
    *("bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key"),
    *("kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module"),
    *("reboot", "swapon", "swapoff", "acct", "quotactl", "syslog", "lookup_dcookie"),
    *("open_by_handle_at", "name_to_handle_at"),
]

_SELF_ONLY = [
    ("prlimit64", 0, None),
    ("sched_setaffinity", 0, None),
    ("sched_setscheduler", 0, None),
    ("sched_setparam", 0, None),
    ("sched_setattr", 0, None),
    ("setpriority", 1, 2),  # (which, who): PRIO_USER with who 0 is every process of the user
    ("ioprio_set", 1, 3),  # (which, who): IOPRIO_WHO_USER likewise
]
"""Calls that change another process (its limits, CPU, priority): only for the caller itself
(process id 0; for the two that also take a user, not per user), so a command cannot starve
or constrain processes outside it that share its user (under Landlock, host processes are
visible). Entries: name, the argument holding the process id, the "whole user" selector."""

# name, x86-64 number, arm64 number: from the kernel's uapi headers (asm/unistd_64.h and
# asm-generic/unistd.h)
_NUMBERS = """
ptrace 101 117          process_vm_readv 310 270   process_vm_writev 311 271
mount 165 40            umount2 166 39             pivot_root 155 41
move_mount 429 429      open_tree 428 428          fsopen 430 430
fsconfig 431 431        fsmount 432 432            fspick 433 433
mount_setattr 442 442   unshare 272 97             setns 308 268
io_uring_setup 425 425  io_uring_enter 426 426     io_uring_register 427 427
bpf 321 280             perf_event_open 298 241    userfaultfd 323 282
keyctl 250 219          add_key 248 217            request_key 249 218
kexec_load 246 104      kexec_file_load 320 294    init_module 175 105
finit_module 313 273    delete_module 176 106      reboot 169 142
swapon 167 224          swapoff 168 225            acct 163 89
quotactl 179 60         open_by_handle_at 304 265  name_to_handle_at 303 264
syslog 103 116          lookup_dcookie 212 18      chroot 161 51
clone 56 220            clone3 435 435             socket 41 198
connect 42 203          socketpair 53 199          pidfd_getfd 438 438
ioctl 16 29             prlimit64 302 261
setpriority 141 140     sched_setaffinity 203 122  sched_setscheduler 144 119
sched_setparam 142 118  sched_setattr 314 274      ioprio_set 251 30
"""


class _Arch(Struct, frozen=True):
    audit: int
    numbers: dict[str, int]
    x32: bool


def _table(column: int) -> dict[str, int]:
    words = _NUMBERS.split()
    return {words[i]: int(words[i + column]) for i in range(0, len(words), 3)}


_X86_64 = _Arch(0xC000003E, _table(1), x32=True)
_AARCH64 = _Arch(0xC00000B7, _table(2), x32=False)
_ARCHES = {"x86_64": _X86_64, "amd64": _X86_64, "aarch64": _AARCH64, "arm64": _AARCH64}


def supported(machine: str | None = None) -> bool:
    """Whether a filter can be built for this (or the named) CPU architecture."""
    return (machine or platform.machine()).lower() in _ARCHES


def build_filter(*, network: bool, machine: str | None = None) -> bytes:
    """The filter as an array of ``struct sock_filter`` (8 bytes each), ready for
    ``seccomp(SECCOMP_SET_MODE_FILTER)`` or bubblewrap's ``--seccomp``."""
    arch = _ARCHES[(machine or platform.machine()).lower()]
    nr = arch.numbers
    code: list[tuple[int, int | str, int | str, int]] = []
    labels: dict[str, int] = {}

    def load(offset: int) -> None:
        code.append((_LD_W_ABS, 0, 0, offset))

    def jump(op: int, value: int, true: int | str, false: int | str = 0) -> None:
        code.append((op, true, false, value))

    def ret(value: int, label: str | None = None) -> None:
        if label:
            labels[label] = len(code)
        code.append((_RET, 0, 0, value))

    load(_ARCH)
    jump(_JEQ, arch.audit, 0, "kill")
    load(_NR)
    if arch.x32:
        jump(_JGE, _X32_BIT, "kill")
    for name in _DENIED:
        jump(_JEQ, nr[name], "eperm")
    jump(_JEQ, nr["clone3"], "enosys")
    jump(_JEQ, nr["clone"], "clone")
    jump(_JEQ, nr["ioctl"], "ioctl")
    for name, arg, user in _SELF_ONLY:
        jump(_JEQ, nr[name], f"self{arg}-{user}")
    jump(_JEQ, nr["socket"], "socket")
    jump(_JEQ, nr["socketpair"], "socketpair")
    if not network:
        jump(_JEQ, nr["connect"], "eacces")
    ret(_ALLOW)
    labels["clone"] = len(code)
    load(_ARGS)  # flags: the low 32 bits of the first argument
    jump(_JSET, _NAMESPACE_FLAGS, "eperm")
    ret(_ALLOW)
    labels["ioctl"] = len(code)
    load(_ARGS + 8)  # the request number (an unsigned int)
    jump(_JEQ, _TIOCSTI, "eperm")
    jump(_JEQ, _TIOCLINUX, "eperm")
    ret(_ALLOW)
    for arg, user in sorted({(arg, user) for _, arg, user in _SELF_ONLY}, key=str):
        labels[f"self{arg}-{user}"] = len(code)
        if user is not None:
            load(_ARGS)  # which: a process, a group (its own, with 0) or a whole user
            jump(_JEQ, user, "eperm")
        load(_ARGS + 8 * arg)  # a process id: 0 (the caller itself) or refused
        jump(_JEQ, 0, 0, "eperm")
        ret(_ALLOW)
    labels["socket"] = len(code)
    if network:
        load(_ARGS)  # the address family
        jump(_JEQ, _AF_INET, "allow")
        jump(_JEQ, _AF_INET6, "allow")
        jump(_JEQ, _AF_UNIX, "eacces", "eafnosupport")  # connect is allowed: no unix socket
    labels["socketpair"] = len(code)  # and socket with the network off: unix only
    load(_ARGS)
    jump(_JEQ, _AF_UNIX, 0, "eafnosupport")
    load(_ARGS + 8)  # the type, with SOCK_NONBLOCK / SOCK_CLOEXEC in the high bits
    code.append((_ALU_AND_K, 0, 0, _SOCK_TYPE_MASK))
    jump(_JEQ, _SOCK_STREAM, "allow")
    jump(_JEQ, _SOCK_SEQPACKET, "allow", "eacces")  # datagrams take any destination
    ret(_ALLOW, "allow")
    ret(_ERRNO | _EAFNOSUPPORT, "eafnosupport")
    ret(_ERRNO | _EACCES, "eacces")
    ret(_ERRNO | _EPERM, "eperm")
    ret(_ERRNO | _ENOSYS, "enosys")
    ret(_KILL_PROCESS, "kill")
    return b"".join(_encode(i, ins, labels) for i, ins in enumerate(code))


def _encode(
    index: int, ins: tuple[int, int | str, int | str, int], labels: dict[str, int]
) -> bytes:
    op, true, false, k = ins

    def offset(target: int | str) -> int:
        if isinstance(target, int):
            return target
        distance = labels[target] - index - 1
        if not 0 <= distance <= 255:  # a classic BPF jump reaches 255 instructions ahead
            raise ValueError(f"seccomp jump to {target} out of range ({distance})")
        return distance

    return struct.pack("=HBBI", op, offset(true), offset(false), k)
