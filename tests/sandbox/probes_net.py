"""Probes against the host's network: canary servers the test runs (TCP, UDP, unix sockets,
abstract unix sockets) that must hear nothing, and netlink changes to the host's interfaces."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from fabric.application.commands import CommandOutcome
from fabric.infrastructure.sandbox import command_runner
from fabric.infrastructure.tools.shell import scrubbed_env

from .lab import Lab, Verdict, probe, source

Address = tuple[str, int] | str

CONNECT = """
import socket
def stream(family, address):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(address)
    s.sendall(b"pwned")
def datagram(family, address):
    socket.socket(family, socket.SOCK_DGRAM).sendto(b"pwned", address)
"""


_CONNECTED = (socket.SOCK_STREAM, socket.SOCK_SEQPACKET)
"""Socket types whose canaries listen (and hear a connection) rather than receive."""


def heard(listeners: dict[str, socket.socket]) -> list[str]:
    """Which canaries got a connection or a datagram (the command has ended by now, so
    anything it sent is already queued)."""
    found = []
    for name, sock in listeners.items():
        sock.setblocking(False)
        try:
            if sock.type in _CONNECTED:
                sock.accept()[0].close()
            else:
                sock.recv(100)
        except (BlockingIOError, InterruptedError):
            continue
        found.append(f"the {name} canary heard from the command")
    return found


@contextlib.contextmanager
def listening(*specs: tuple[str, int, int, Address]) -> Iterator[dict[str, socket.socket]]:
    """Canary sockets: (name, family, type, address) each."""
    socks: dict[str, socket.socket] = {}
    try:
        for name, family, kind, address in specs:
            sock = socket.socket(family, kind)
            sock.bind(address)
            if kind in _CONNECTED:
                sock.listen(64)
            socks[name] = sock
        yield socks
    finally:
        for sock in socks.values():
            sock.close()


def _ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@probe(
    "TCP to the host",
    "escape",
    "connect to a canary TCP server the test runs on 127.0.0.1 (and ::1); judged by the canary",
)
async def tcp_canary(lab: Lab) -> Verdict:
    specs: list[tuple[str, int, int, Address]] = [
        ("127.0.0.1 TCP", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0))
    ]
    if _ipv6():
        specs.append(("::1 TCP", socket.AF_INET6, socket.SOCK_STREAM, ("::1", 0)))
    with listening(*specs) as socks:
        ports = [s.getsockname()[1] for s in socks.values()]
        out = await lab.python(
            source(
                CONNECT,
                """
            attempt("v4", lambda: stream(socket.AF_INET, ("127.0.0.1", int(ARGS[0]))))
            if len(ARGS) > 1:
                attempt("v6", lambda: stream(socket.AF_INET6, ("::1", int(ARGS[1]))))
            """,
            ),
            *ports,
        )
        return lab.judge(out, heard(socks))


@probe(
    "UDP to the host",
    "escape",
    "send a datagram to a canary UDP socket the test runs on 127.0.0.1; judged by the canary",
)
async def udp_canary(lab: Lab) -> Verdict:
    spec = ("127.0.0.1 UDP", socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 0))
    with listening(spec) as socks:
        port = socks["127.0.0.1 UDP"].getsockname()[1]
        out = await lab.python(
            source(
                CONNECT,
                'attempt("udp", lambda: datagram(socket.AF_INET, ("127.0.0.1", int(ARGS[0]))))',
            ),
            port,
        )
        return lab.judge(out, heard(socks))


UNIX = """
import socket
KINDS = {"stream": socket.SOCK_STREAM, "seqpacket": socket.SOCK_SEQPACKET,
         "dgram": socket.SOCK_DGRAM, "raw": socket.SOCK_RAW}  # AF_UNIX SOCK_RAW is a datagram
def new(kind):
    s = socket.socket(socket.AF_UNIX, KINDS[kind])
    s.settimeout(3)
    return s
def pair(kind):
    s = socket.socketpair(socket.AF_UNIX, KINDS[kind])[0]
    s.settimeout(3)
    return s
def connect(s, address):
    s.connect(address)
    s.send(b"pwned")
def sendto(s, address):
    s.sendto(b"pwned", address)
def sendmsg(s, address):  # the address in msg_name, inside the struct msghdr
    s.sendmsg([b"pwned"], [], 0, address)
def every(make, kinds, targets, ways=(connect, sendto, sendmsg)):
    for kind in kinds:
        for target in targets:
            for way in ways:
                label = f"{make.__name__}({kind}) {way.__name__} {target[-12:]!r}"
                attempt(label, lambda: way(make(kind), target))
"""
"""Attacks on unix sockets, for a program's ARGS: fresh sockets (``new``) and the ones
``socketpair`` hands out already connected (``pair``), each way of naming a destination."""

_NETWORK = {False: "", True: " (network on)"}


def _canaries(lab: Lab, *kinds: str) -> list[tuple[str, int, int, Address]]:
    """Canary unix sockets in a host folder the command can see (the lab lives outside /tmp,
    which bubblewrap replaces), one per socket type."""
    types = {"stream": socket.SOCK_STREAM, "seqpacket": socket.SOCK_SEQPACKET}
    types["datagram"] = socket.SOCK_DGRAM
    return [
        (f"unix {kind}", socket.AF_UNIX, types[kind], str(lab.outside / f"{kind}.sock"))
        for kind in kinds
    ]


async def _python(lab: Lab, code: str, *args: object, network: bool) -> CommandOutcome:
    """``lab.python`` for a pack with the network off or on."""
    settings = lab.settings().model_copy(update={"network": network})
    runner = command_runner(settings, lab.ws)
    argv = [sys.executable, "-c", lab.program(code), lab.token, *map(str, args)]
    return await runner.run(argv, env=scrubbed_env(settings), timeout=60.0)


Attack = Callable[[Lab, bool], Awaitable[Verdict]]


def _with(check: Attack, network: bool) -> Callable[[Lab], Awaitable[Verdict]]:
    """``check`` for one network setting (a function of this module, as the matrix's order
    needs: probes.py sorts probes by their check's module)."""

    async def bound(lab: Lab) -> Verdict:
        return await check(lab, network)

    return bound


def _both(name: str, what: str) -> Callable[[Attack], Attack]:
    """Register a probe twice: for a pack with the network off, and with it on."""

    def register(check: Attack) -> Attack:
        for network, suffix in _NETWORK.items():
            how = "on" if network else "off"
            probe(name + suffix, "escape", f"{what} (the network {how})")(_with(check, network))
        return check

    return register


@_both(
    "unix socket (stream)",
    "connect to canary unix stream and seqpacket sockets listening in a host folder the command "
    "can see and in a host temp folder (/tmp); judged by the canaries",
)
async def unix_stream(lab: Lab, network: bool) -> Verdict:
    temp = Path(tempfile.mkdtemp(prefix="fabric-canary-"))
    try:
        in_tmp = ("unix (/tmp)", socket.AF_UNIX, socket.SOCK_STREAM, str(temp / "canary.sock"))
        specs = [*_canaries(lab, "stream", "seqpacket"), in_tmp]
        with listening(*specs) as socks:
            stream, seqpacket, tmp = (spec[3] for spec in specs)
            code = """
            every(new, ["stream"], ARGS[0::2], [connect])
            every(new, ["seqpacket"], ARGS[1:2], [connect])
            """
            out = await _python(lab, source(UNIX, code), stream, seqpacket, tmp, network=network)
            return lab.judge(out, heard(socks))
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@_both(
    "unix socket (datagram)",
    "send datagrams to a canary unix datagram socket in a host folder the command can see: "
    "sendto, sendmsg (the address in msg_name) and connect, from SOCK_DGRAM sockets and from "
    "SOCK_RAW ones (which the kernel makes datagram sockets); judged by the canary",
)
async def unix_datagram(lab: Lab, network: bool) -> Verdict:
    with listening(*_canaries(lab, "datagram")) as socks:
        code = 'every(new, ["dgram", "raw"], ARGS)'
        out = await _python(lab, source(UNIX, code), lab.outside / "datagram.sock", network=network)
        return lab.judge(out, heard(socks))


@_both(
    "unix socketpair",
    "from each kind of socketpair (datagram, raw, stream, seqpacket), sendto, sendmsg with "
    "msg_name and connect to canary unix stream, seqpacket and datagram sockets in a host "
    "folder the command can see; judged by the canaries",
)
async def unix_socketpair(lab: Lab, network: bool) -> Verdict:
    specs = _canaries(lab, "stream", "seqpacket", "datagram")
    with listening(*specs) as socks:
        code = 'every(pair, ["dgram", "raw", "stream", "seqpacket"], ARGS)'
        out = await _python(lab, source(UNIX, code), *(s[3] for s in specs), network=network)
        return lab.judge(out, heard(socks))


@_both(
    "abstract unix socket",
    "connect and send to canary abstract unix sockets (no file: they live in the network "
    "namespace), from fresh sockets and socketpairs; judged by the canaries",
)
async def abstract_unix(lab: Lab, network: bool) -> Verdict:
    name = f"\0fabric-canary-{secrets.token_hex(6)}"
    specs: list[tuple[str, int, int, Address]] = [
        ("abstract stream", socket.AF_UNIX, socket.SOCK_STREAM, name),
        ("abstract datagram", socket.AF_UNIX, socket.SOCK_DGRAM, name + "-dgram"),
    ]
    with listening(*specs) as socks:
        code = """
        stream, dgram = "\\0" + ARGS[0], "\\0" + ARGS[0] + "-dgram"
        every(new, ["stream"], [stream], [connect])
        every(new, ["dgram", "raw"], [dgram])
        every(pair, ["dgram", "raw", "stream", "seqpacket"], [stream, dgram])
        """
        out = await _python(lab, source(UNIX, code), name[1:], network=network)
        return lab.judge(out, heard(socks))


RAW_NETLINK = """
import socket, struct
def new_address(address, index):
    ip = socket.inet_aton(address)
    attr = lambda kind, value: struct.pack("=HH", 4 + len(value), kind) + value
    body = struct.pack("=BBBBI", socket.AF_INET, 32, 0, 254, index) + attr(2, ip) + attr(1, ip)
    # RTM_NEWADDR with NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE
    return struct.pack("=IHHII", 16 + len(body), 20, 0x605, 1, 0) + body
def raw(address, index):
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    s.sendto(new_address(address, index), (0, 0))
    return s.recv(4096)[16:20]
"""


def _ip(*args: str) -> str:
    ip = shutil.which("ip")
    if ip is None:
        return ""
    return subprocess.run([ip, *args], capture_output=True, text=True, check=False).stdout


@probe(
    "netlink",
    "escape",
    "add an address to the host's lo and a dummy link, with `ip` and with a raw netlink "
    "socket; judged by the host's `ip addr` / `ip link` (undone if they changed)",
)
async def netlink(lab: Lab) -> Verdict:
    a, b = secrets.randbelow(250) + 1, secrets.randbelow(250) + 1
    by_ip, by_raw, link = f"127.254.{a}.{b}", f"127.253.{a}.{b}", f"fp{secrets.token_hex(4)}"
    ip = shutil.which("ip") or ""
    out = await lab.python(
        source(
            RAW_NETLINK,
            """
        import subprocess
        ip, by_ip, by_raw, link, index = ARGS
        if ip:
            attempt("ip addr", lambda: subprocess.run(
                [ip, "addr", "add", by_ip + "/32", "dev", "lo"], capture_output=True).stderr)
            attempt("ip link", lambda: subprocess.run(
                [ip, "link", "add", link, "type", "dummy"], capture_output=True).stderr)
        attempt("raw netlink", lambda: raw(by_raw, int(index)))
        """,
        ),
        ip,
        by_ip,
        by_raw,
        link,
        socket.if_nametoindex("lo"),
    )
    found = []
    addresses = _ip("-o", "addr", "show", "dev", "lo")
    for address in (by_ip, by_raw):
        if f"{address}/32" in addresses:
            found.append(f"{address} was added to the host's lo")
            _ip("addr", "del", f"{address}/32", "dev", "lo")
    if link in _ip("-o", "link", "show"):
        found.append(f"link {link} was added to the host")
        _ip("link", "del", link)
    return lab.judge(out, found)
