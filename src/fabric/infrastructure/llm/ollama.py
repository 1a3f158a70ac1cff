"""The Ollama backend: where the server is, what it offers, and chat through its native API.

- ``ollama_base_url``: the server's URL, from the configured ``base_url`` or ``OLLAMA_HOST``.
- ``OllamaCatalog`` (``ollama_catalog.py``): its models and what each can do; starts
  ``ollama serve`` when asked to and it is not running.
- ``OllamaChatClient`` (``ollama_chat.py``): ``/api/chat``, streaming, with ``num_ctx``.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping

from .ollama_catalog import OllamaCatalog, parse_parameter_size
from .ollama_chat import OllamaChatClient

__all__ = ["OllamaCatalog", "OllamaChatClient", "ollama_base_url", "parse_parameter_size"]

DEFAULT_PORT = 11434
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"


def ollama_base_url(configured: str | None, env: Mapping[str, str] | None = None) -> str:
    """The native API root (no trailing slash, no ``/v1``): ``configured`` when set, else
    ``OLLAMA_HOST`` read as Ollama's own clients read it, else http://127.0.0.1:11434."""
    if configured and configured.strip():
        url = configured.strip().rstrip("/")
        return url.removesuffix("/v1").rstrip("/")  # Ollama's OpenAI path, a common slip
    value = (os.environ if env is None else env).get("OLLAMA_HOST", "")
    return _parse_host(value)


def _parse_host(value: str) -> str:
    """``OLLAMA_HOST`` as the Go CLI (``envconfig.Host``) and ollama-python (``_parse_host``)
    read it: surrounding spaces and quotes dropped; scheme ``http`` unless given; host
    127.0.0.1 unless given; port 11434, or 80/443 when the scheme is written out
    (``http://host`` is port 80); IPv6 in brackets; a path kept, without trailing slashes; an
    invalid port falls back to the default.

    One deliberate difference: the listen-everywhere addresses 0.0.0.0 and ``::`` (a common
    ``OLLAMA_HOST`` for the server) become 127.0.0.1 and ``::1``. Ollama's clients pass them
    on unchanged, which works on Linux and macOS (they treat it as this host) but not on
    Windows; the server also listens on loopback, so this works everywhere.
    """
    value = value.strip().strip("\"'").strip()
    scheme, sep, rest = value.partition("://")
    scheme = scheme.lower()
    default_port = DEFAULT_PORT
    if not sep:
        scheme, rest = "http", value
    elif scheme == "http":
        default_port = 80
    elif scheme == "https":
        default_port = 443
    host_port, _, path = rest.partition("/")
    host, port = _split_host_port(host_port, default_port)
    host = host or "127.0.0.1"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None and ip.is_unspecified:
        host = "127.0.0.1" if ip.version == 4 else "::1"
    if ip is not None and ip.version == 6:
        host = f"[{host}]"
    path = path.strip("/")
    return f"{scheme}://{host}:{port}" + (f"/{path}" if path else "")


def _split_host_port(text: str, default_port: int) -> tuple[str, int]:
    if text.startswith("["):  # [v6] or [v6]:port
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:  # host:port or :port
        host, port_text = text.split(":")
    else:  # a name, an IPv4 address, or a bare IPv6 address
        host, port_text = text, ""
    port = int(port_text) if port_text.isdigit() and int(port_text) <= 65535 else default_port
    return host, port
