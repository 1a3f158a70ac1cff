"""The service's API token: taken from the environment, or made once and kept owner-only in a
file; and the rule that a service reachable beyond loopback needs a token the operator chose.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from fabric.domain.errors import ConfigError

MIN_TOKEN_LENGTH = 16
ENV_SOURCE = "environment variable"
"""How ``load_or_create_token``'s source starts when the token came from the environment."""
_MAKE_ONE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def check_token(token: str, where: str) -> None:
    """Refuse tokens too short to resist guessing, or that cannot travel in a header."""
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigError(
            f"The API token from {where} is {len(token)} characters long; "
            f"it needs at least {MIN_TOKEN_LENGTH}.",
            hint=f"Use a random one: {_MAKE_ONE}",
        )
    if not all(33 <= ord(c) <= 126 for c in token):
        raise ConfigError(
            f"The API token from {where} has spaces, control or non-ASCII characters, "
            "which an Authorization header cannot carry.",
            hint=f"Use a random one: {_MAKE_ONE}",
        )


def load_or_create_token(*, env: Mapping[str, str], env_name: str, path: Path) -> tuple[str, str]:
    """The API token and where it came from: ``env_name`` if set, else the token file, else a
    new random token written to that file (owner-only). Errors never contain the token."""
    if from_env := env.get(env_name, "").strip():
        check_token(from_env, f"${env_name}")
        return from_env, f"{ENV_SOURCE} {env_name}"
    if path.exists() or path.is_symlink():
        return _read_token_file(path), f"file {path}"
    token = secrets.token_urlsafe(32)
    try:
        _write_token_file(path, token)
    except FileExistsError:  # another server created it meanwhile: share its token
        return _read_token_file(path), f"file {path}"
    except OSError as exc:
        raise ConfigError(
            f"Could not write a new API token to {path}: {exc.strerror or exc}.",
            hint=f"Set {env_name}, or point the token file setting at a writable place.",
        ) from exc
    return token, f"generated, stored in {path} (owner-only)"


def _read_token_file(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, encoding="utf-8") as file:
            info = os.fstat(file.fileno())
            token = file.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(
            f"Could not read the API token file {path}: {reason}.",
            hint="It must be a text file you own, not a symlink; delete it to get a new token.",
        ) from exc
    if os.name == "posix" and info.st_mode & 0o077:
        raise ConfigError(
            f"The API token file {path} is open to other users (mode {info.st_mode & 0o777:o}).",
            hint=f"Make it owner-only: chmod 600 {path}",
        )
    if os.name == "posix" and info.st_uid != os.getuid():
        raise ConfigError(
            f"The API token file {path} belongs to another user.",
            hint="Use a token file you own, or delete this one to have a new one generated.",
        )
    if not token:
        raise ConfigError(
            f"The API token file {path} is empty.",
            hint="Delete it to have a new token generated, or write a token into it.",
        )
    check_token(token, str(path))
    return token


def _write_token_file(path: Path, token: str) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(token + "\n")
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        path.unlink(missing_ok=True)  # never leave an empty or partial token behind
        raise


def is_loopback_host(host: str) -> bool:
    """127.0.0.0/8, ::1 (also IPv4-mapped, also in brackets) and ``localhost``."""
    host = host.strip().strip("[]").lower().removesuffix(".")
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def check_bind(host: str, token_source: str, *, env_name: str = "FABRIC_API_TOKEN") -> None:
    """Refuse to listen beyond this machine (a non-loopback address, or all of them with
    0.0.0.0 / ::) unless the token was set on purpose in the environment: a token generated
    into a local file is not enough to expose the service."""
    if is_loopback_host(host) or token_source.startswith(ENV_SOURCE):
        return
    bare = host.strip().strip("[]")
    try:
        everywhere = not bare or ipaddress.ip_address(bare).is_unspecified
    except ValueError:
        everywhere = False
    where = f"every network interface ({bare or 'all'})" if everywhere else host
    raise ConfigError(
        f"Refusing to listen on {where}: that exposes the service to other machines, and its "
        f"token was not set on purpose ({token_source}).",
        hint=f"Set {env_name} to a long random token you share with the clients, "
        "or listen on 127.0.0.1.",
    )
