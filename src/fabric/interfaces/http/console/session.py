"""The console's session: a stateless signed cookie, and the CSRF token that goes with it.

The page has the service token typed in once (``POST /console/login``) and gets a cookie,
``fabric_console=<expiry>.<nonce>.<signature>``: an expiry time, a random nonce and an
HMAC-SHA256 of both, keyed by a key derived from the service token. Nothing is stored on the
server, so any node that knows the token can check it, a restart keeps it, and a new token
ends every session. The cookie is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no
other site's page sends it) and ``Secure`` over https; it lasts ``SESSION_SECONDS``.

The CSRF token is another HMAC of the same expiry and nonce (under a second derived key): the
page reads it from the login answer or ``GET /console/session`` and sends it as
``X-Fabric-CSRF`` with every request that changes something. A request that comes with the
cookie alone must bring it (and, if it has an ``Origin``, come from this host): a page of
another site can make the browser send the cookie, but it cannot read the CSRF token.
All comparisons are constant-time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit

COOKIE = "fabric_console"
CSRF_HEADER = "X-Fabric-CSRF"
SESSION_SECONDS = 12 * 3600
SAFE_METHODS = frozenset({"GET", "HEAD"})
_NONCE_BYTES = 18
_MAX_COOKIE = 200  # a real one is about 70 characters


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class ConsoleSessions:
    """Makes and checks console session cookies for one service token."""

    def __init__(
        self,
        token: str,
        *,
        clock: Callable[[], float] = time.time,
        lifetime: int = SESSION_SECONDS,
    ) -> None:
        secret = token.encode()
        self._cookie_key = hmac.new(secret, b"fabric console cookie v1", hashlib.sha256).digest()
        self._csrf_key = hmac.new(secret, b"fabric console csrf v1", hashlib.sha256).digest()
        self._clock = clock
        self.lifetime = lifetime

    def issue(self) -> tuple[str, str]:
        """A new session: the cookie's value and its CSRF token."""
        expiry = int(self._clock()) + self.lifetime
        body = f"{expiry}.{_b64(secrets.token_bytes(_NONCE_BYTES))}"
        return f"{body}.{self._sign(self._cookie_key, body)}", self._sign(self._csrf_key, body)

    def csrf_for(self, cookie: str) -> str | None:
        """The CSRF token of a valid, unexpired cookie value; None for any other value."""
        if len(cookie) > _MAX_COOKIE:
            return None
        body, _, signature = cookie.rpartition(".")
        expiry, _, _nonce = body.partition(".")
        expected = self._sign(self._cookie_key, body)
        # compare first, whatever the rest says, so timing tells nothing
        if not hmac.compare_digest(signature.encode(), expected.encode()):
            return None
        if not expiry.isdigit() or int(expiry) <= self._clock():
            return None
        return self._sign(self._csrf_key, body)

    def csrf_of_request(self, headers: Iterable[tuple[bytes, bytes]]) -> str | None:
        """The CSRF token of the first valid session cookie the request carries, or None."""
        for value in cookie_values(headers, COOKIE):
            csrf = self.csrf_for(value)
            if csrf is not None:
                return csrf
        return None

    def set_cookie(self, value: str, *, secure: bool) -> str:
        """The ``Set-Cookie`` header value that starts a session."""
        return f"{COOKIE}={value}; Max-Age={self.lifetime}; Path=/; HttpOnly; SameSite=Strict" + (
            "; Secure" if secure else ""
        )

    @staticmethod
    def clear_cookie(*, secure: bool) -> str:
        """The ``Set-Cookie`` header value that ends a session in the browser."""
        return f"{COOKIE}=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict" + (
            "; Secure" if secure else ""
        )

    @staticmethod
    def _sign(key: bytes, body: str) -> str:
        return _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())


def cookie_values(headers: Iterable[tuple[bytes, bytes]], name: str) -> list[str]:
    """Every value of cookie ``name`` in the request's ``Cookie`` headers."""
    found = []
    for key, value in headers:
        if key.lower() != b"cookie":
            continue
        for part in value.decode("latin-1").split(";"):
            key_, sep, value_ = part.strip().partition("=")
            if sep and key_ == name:
                found.append(value_.strip().strip('"'))
    return found


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> list[str]:
    return [v.decode("latin-1") for k, v in headers if k.lower() == name]


def same_origin(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether the request's ``Origin`` header, if it has one, names the host it was sent
    to (its ``Host``, with the scheme's default port when none is given)."""
    pairs = list(headers)
    origins, hosts = header(pairs, b"origin"), header(pairs, b"host")
    if not origins:
        return True
    if len(origins) != 1 or len(hosts) != 1:
        return False
    try:
        origin, host = urlsplit(origins[0].strip()), urlsplit("//" + hosts[0].strip())
        if origin.scheme not in ("http", "https") or not origin.hostname or not host.hostname:
            return False
        default = 443 if origin.scheme == "https" else 80
        return (origin.hostname, origin.port or default) == (host.hostname, host.port or default)
    except ValueError:  # a port that is no number, a malformed address
        return False


def check_cookie_request(sessions: ConsoleSessions, scope: Mapping[str, Any]) -> str | None:
    """For a request that has no ``Authorization``: None when its session cookie lets it
    through; else why not (``"no_session"``: no valid cookie; ``"csrf"``: a change without
    the CSRF token, or from another origin)."""
    headers = scope.get("headers", ())
    csrf = sessions.csrf_of_request(headers)
    if csrf is None:
        return "no_session"
    if scope.get("method") in SAFE_METHODS:
        return None
    sent = header(headers, CSRF_HEADER.lower().encode())
    given = sent[0].strip() if len(sent) == 1 else ""
    if hmac.compare_digest(given.encode(), csrf.encode()) and same_origin(headers):
        return None
    return "csrf"


CSRF_MESSAGE = (
    "This request came with the console's session cookie but without its CSRF token, or "
    "from a page of another site: nothing was changed."
)
CSRF_HINT = (
    f"Send the token from POST /console/login or GET /console/session as {CSRF_HEADER} "
    "(reloading the console does), or use 'Authorization: Bearer <token>'."
)


def secure_request(scope: MutableMapping[str, Any] | Mapping[str, Any]) -> bool:
    """Whether the request came over https (the cookie is then marked ``Secure``)."""
    return scope.get("scheme") in ("https", "wss")
