"""Which addresses fetch_url may reach: public unicast only, unless a pack allows private ones.

Every address a host resolves to is judged; IPv4 addresses embedded in IPv6 ones (mapped,
6to4, NAT64) are judged as IPv4, so ``::ffff:127.0.0.1`` is loopback like ``127.0.0.1``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

from fabric.domain.errors import SandboxError, ToolError

_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def check_address(ip: str, *, allow_private: bool = False, host: str | None = None) -> None:
    """Refuse ``ip`` unless it is a public unicast address (or ``allow_private`` is set).

    IPv4 addresses embedded in IPv6 ones (mapped, 6to4, NAT64) are judged as IPv4.
    """
    if allow_private:
        return
    address = ipaddress.ip_address(ip)
    judged: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        nat64 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF) if address in _NAT64 else None
        if embedded := address.ipv4_mapped or nat64:
            judged = [embedded]
        elif address.sixtofour:
            judged = [address.sixtofour, address]
    for candidate in judged:
        kind = _address_kind(candidate)
        if kind is not None:
            where = f"{host} resolves to {ip}" if host and host != ip else ip
            raise SandboxError(
                f"{where}, a {kind} address; fetch_url only reaches public hosts",
                hint="fetch a public URL instead; to reach local services, set "
                "sandbox.allow_private_addresses: true for the pack",
            )


def _address_kind(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """What makes ``address`` non-public, or None if it is a public unicast address."""
    kinds = ("loopback", "unspecified", "link_local", "multicast", "private", "reserved")
    kind = next((k for k in kinds if getattr(address, f"is_{k}")), None)
    if kind is None and not address.is_global:
        kind = "non_public"
    return kind.replace("_", "-") if kind else None


async def check_host(host: str, port: int, *, allow_private: bool = False) -> list[str]:
    """Resolve ``host`` and check every address it has; return them in resolver order."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ToolError(
            f"cannot resolve host {host!r}: {exc}", hint="check the URL for typos"
        ) from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for ip in addresses:
        check_address(ip, allow_private=allow_private, host=host)
    return addresses
