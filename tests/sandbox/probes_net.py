"""Probes against the host's network: canary servers the test runs (TCP, UDP, unix sockets,
abstract unix sockets) that must hear nothing, and netlink changes to the host's interfaces."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

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


def heard(listeners: dict[str, socket.socket]) -> list[str]:
    """Which canaries got a connection or a datagram (the command has ended by now, so
    anything it sent is already queued)."""
    found = []
    for name, sock in listeners.items():
        sock.setblocking(False)
        try:
            if sock.type == socket.SOCK_STREAM:
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
            if kind == socket.SOCK_STREAM:
                sock.listen(8)
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


@probe(
    "unix socket (stream)",
    "escape",
    "connect to canary unix sockets listening in a host folder the command can see and in "
    "a host temp folder (/tmp); judged by the canaries",
)
async def unix_stream(lab: Lab) -> Verdict:
    temp = Path(tempfile.mkdtemp(prefix="fabric-canary-"))
    try:
        visible, in_tmp = lab.outside / "canary.sock", temp / "canary.sock"
        specs = [
            ("unix (host folder)", socket.AF_UNIX, socket.SOCK_STREAM, str(visible)),
            ("unix (/tmp)", socket.AF_UNIX, socket.SOCK_STREAM, str(in_tmp)),
        ]
        with listening(*specs) as socks:
            out = await lab.python(
                source(
                    CONNECT,
                    """
                for path in ARGS:
                    attempt(path, lambda: stream(socket.AF_UNIX, path))
                """,
                ),
                visible,
                in_tmp,
            )
            return lab.judge(out, heard(socks))
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@probe(
    "unix socket (datagram)",
    "escape",
    "send datagrams (sendto and sendmsg, no connect) to a canary unix datagram socket in a "
    "host folder the command can see; judged by the canary",
)
async def unix_datagram(lab: Lab) -> Verdict:
    path = lab.outside / "dgram.sock"
    with listening(("unix datagram", socket.AF_UNIX, socket.SOCK_DGRAM, str(path))) as socks:
        out = await lab.python(
            source(
                CONNECT,
                """
            attempt("sendto", lambda: datagram(socket.AF_UNIX, ARGS[0]))
            def sendmsg():
                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                s.sendmsg([b"pwned"], [], 0, ARGS[0])
            attempt("sendmsg", sendmsg)
            """,
            ),
            path,
        )
        return lab.judge(out, heard(socks))


@probe(
    "abstract unix socket",
    "escape",
    "connect and send to canary abstract unix sockets (no file: they live in the network "
    "namespace); judged by the canaries",
)
async def abstract_unix(lab: Lab) -> Verdict:
    name = f"\0fabric-canary-{secrets.token_hex(6)}"
    specs = [
        ("abstract stream", socket.AF_UNIX, socket.SOCK_STREAM, name),
        ("abstract datagram", socket.AF_UNIX, socket.SOCK_DGRAM, name + "-dgram"),
    ]
    with listening(*specs) as socks:
        out = await lab.python(
            source(
                CONNECT,
                """
            name = "\\0" + ARGS[0]
            attempt("stream", lambda: stream(socket.AF_UNIX, name))
            attempt("datagram", lambda: datagram(socket.AF_UNIX, name + "-dgram"))
            """,
            ),
            name[1:],
        )
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
