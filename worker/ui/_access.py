"""Who may read the browser: a token (``EVALQ_UI_TOKEN``), required unless bound to loopback.

A browser logs in once (a form posting the token); the session cookie then holds an HMAC of the
token, never the token itself. Scripts may send ``Authorization: Bearer <token>`` instead.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

from starlette.requests import Request

__all__ = [
    "COOKIE",
    "MIN_TOKEN_CHARS",
    "TOKEN_SETTING",
    "Access",
    "UiConfigError",
    "is_loopback",
]

TOKEN_SETTING = "EVALQ_UI_TOKEN"  # noqa: S105 - the variable's name, not a secret
COOKIE = "evalq_ui"
MIN_TOKEN_CHARS = 16
_SESSION_CONTEXT = b"evalq.ui.session.v1"


class UiConfigError(ValueError):
    """The browser cannot start as configured (the message names the variable or flag)."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1); names are not resolved."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may be reachable from anywhere


class Access:
    """The token rule of one server: open (loopback, no token) or token-protected."""

    def __init__(self, token: str | None) -> None:
        self._token = token
        self._session = None if token is None else _session_value(token)

    @classmethod
    def for_host(cls, host: str, token: str | None) -> Access:
        """The rule for serving on ``host``; refuses a non-loopback host without a token."""
        token = token or None
        if token is None and not is_loopback(host):
            raise UiConfigError(
                f"{TOKEN_SETTING}: required to serve on {host} (not a loopback address); "
                "set it, or serve on --host 127.0.0.1"
            )
        if token is not None and len(token) < MIN_TOKEN_CHARS:
            raise UiConfigError(f"{TOKEN_SETTING}: too short (at least {MIN_TOKEN_CHARS} chars)")
        return cls(token)

    @property
    def open(self) -> bool:
        """True when no token is asked for (loopback without ``EVALQ_UI_TOKEN``)."""
        return self._token is None

    def token_matches(self, given: str) -> bool:
        """Constant-time comparison of a submitted token."""
        if self._token is None:
            return True
        return hmac.compare_digest(given.encode("utf-8"), self._token.encode("utf-8"))

    def session_value(self) -> str:
        """The cookie value of a logged-in browser."""
        if self._session is None:
            raise UiConfigError("no session without a token")
        return self._session

    def allows(self, request: Request) -> bool:
        """Whether the request carries the session cookie or the bearer token."""
        if self._session is None:
            return True
        cookie = request.cookies.get(COOKIE, "")
        if hmac.compare_digest(cookie.encode("utf-8"), self._session.encode("utf-8")):
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and bool(given) and self.token_matches(given)


def _session_value(token: str) -> str:
    return hmac.new(token.encode("utf-8"), _SESSION_CONTEXT, hashlib.sha256).hexdigest()
