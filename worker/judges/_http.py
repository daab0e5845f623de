"""HTTP plumbing of the judges: the default client, retries inside the budget, error translation.

This is the *only* module that turns httpx (and aiohttp) exceptions into :class:`JudgeError`.

Why an aiohttp-backed transport by default: one worker keeps hundreds of judge requests in
flight, and httpx's own connection pool collapses past ~32 concurrent requests (measured: 48 req/s
at 64 in flight against a 100 ms server) while aiohttp's pool keeps up (see
``bench/judge_transport.py``). The transport still speaks httpx, so callers may inject any
``httpx.AsyncClient`` instead. Without an injected client a :class:`JsonEndpoint` posts through
the aiohttp session directly: the httpx ``Request``/``Response`` objects around every call were
~10% of a busy worker's CPU (measured with ``py-spy`` on the P1 benchmark).

Why the retry wait is computed here rather than by stamina: the wait must be known *before* it
is scheduled, so that no wait (and no ``Retry-After``) ever runs past the evaluator's deadline
(:func:`worker.judges._deadline.remaining_s`). stamina still drives the loop via its backoff hook.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import json
import math
import random
import re
import ssl
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from urllib.parse import urlsplit

import aiohttp
import httpx
import stamina
import yarl

from ._body import ACCEPT_ENCODING, BodyTooLarge, read_bounded
from ._deadline import remaining_s
from ._errors import InvalidReply, JudgeError

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_REPLY_BYTES",
    "ERROR_BODY_CAP",
    "AiohttpTransport",
    "JsonEndpoint",
    "Reply",
    "RetryPolicy",
    "body_limit",
    "check_api_key",
    "check_base_url",
    "default_client",
    "error_message",
    "is_retryable_status",
    "parse_retry_after",
    "sanitize",
    "translated_errors",
]

DEFAULT_MAX_CONNECTIONS = 1024  # far above the hundreds in flight a worker keeps
DEFAULT_MAX_REPLY_BYTES = 2 * 1024 * 1024
"""Largest decoded 2xx body a judge accepts (``INVALID_RESPONSE`` past it). A System One or
chat reply is a few KiB; the cap keeps concurrency x cap the worst case of reply memory."""
ERROR_BODY_CAP = 65_536
"""Bytes of an error reply read to find its message; past it the connection is dropped."""
MESSAGE_CAP = 200  # error messages are for logs: short, one line
_KEEPALIVE_S = 30.0
_BEARER = re.compile(r"(?i)bearer\s+\S+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle is most of the 25-40 ms a new client costs; do it once per process.
    return httpx.create_ssl_context()


_NO_TIMERS = aiohttp.ClientTimeout(total=None, connect=None, sock_read=None, sock_connect=None)


def _aiohttp_timeout(request: httpx.Request) -> aiohttp.ClientTimeout:
    timeout = request.extensions.get("timeout", {})
    return aiohttp.ClientTimeout(
        total=None,
        connect=timeout.get("pool"),
        sock_connect=timeout.get("connect"),
        sock_read=timeout.get("read"),
    )


def _as_httpx_error(exc: aiohttp.ClientError | OSError) -> httpx.TransportError:
    """The httpx exception an aiohttp failure corresponds to (keeps the httpx contract)."""
    name = type(exc).__name__  # the type only: aiohttp messages may quote URLs or headers
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(name)
    if isinstance(exc, TimeoutError):  # aiohttp's ServerTimeoutError/SocketTimeoutError included
        return httpx.ReadTimeout(name)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(name)
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol(name)
    return httpx.ReadError(name)  # disconnects, resets, broken payloads


@contextlib.contextmanager
def _aiohttp_errors() -> Iterator[None]:
    try:
        yield
    except (aiohttp.ClientError, OSError) as exc:  # OSError covers TimeoutError in 3.11
        raise _as_httpx_error(exc) from None


class _ResponseStream(httpx.AsyncByteStream):
    """An aiohttp response body as an httpx stream; releases the connection when closed."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _aiohttp_errors():
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        self._response.release()


@dataclass(frozen=True)
class Reply:
    """One HTTP reply: status, headers (case-insensitive) and the decoded body, bounded.

    ``complete`` is False when the body was abandoned (over its limit, or an unknown or corrupt
    encoding): ``content`` is then empty and the connection was dropped, not reused.
    """

    status: int
    headers: Mapping[str, str]
    content: bytes
    complete: bool = True


def body_limit(status: int, max_reply_bytes: int) -> int:
    """Bytes of a reply worth reading: the reply cap for 2xx, :data:`ERROR_BODY_CAP` otherwise."""
    return max_reply_bytes if 200 <= status < 300 else ERROR_BODY_CAP


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An httpx transport over one aiohttp session per event loop.

    aiohttp sessions are bound to the loop that created them; a judge reused under a new loop (for
    example one ``asyncio.run`` per task) transparently starts a fresh session there.
    """

    def __init__(
        self,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """``headers`` are sent with every request (a :class:`JsonEndpoint`'s own transport)."""
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        self._max_connections = max_connections
        # Only the encodings worker.judges._body decodes within its limit (no br, no zstd).
        self._headers = {"Accept-Encoding": ACCEPT_ENCODING, **(headers or {})}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None

    async def _current_session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is not None and not self._session.closed and self._loop is loop:
            return self._session
        old, old_loop = self._session, self._loop
        connector = aiohttp.TCPConnector(
            limit=self._max_connections,
            limit_per_host=0,
            keepalive_timeout=_KEEPALIVE_S,
            ssl=_ssl_context(),
        )
        # trust_env=False: a library reads no environment (proxies are the caller's choice).
        # auto_decompress=False: aiohttp would inflate each chunk whole on the loop (_body.py).
        self._session = aiohttp.ClientSession(
            connector=connector, trust_env=False, headers=self._headers, auto_decompress=False
        )
        self._loop = loop
        if old is not None and old_loop is not None and old_loop.is_closed():
            # Its loop is gone, so closing only marks it closed (nothing to await on that loop);
            # without this it would log "Unclosed client session" when collected.
            await old.close()
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` with aiohttp; the body is streamed back through httpx."""
        session = await self._current_session()
        with _aiohttp_errors():
            response = await session.request(
                request.method,
                str(request.url),
                headers=list(request.headers.multi_items()),
                data=request.content or None,
                allow_redirects=False,
                timeout=_aiohttp_timeout(request),
            )
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_ResponseStream(response),
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def post(
        self,
        url: yarl.URL | str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        *,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> Reply:
        """POST ``body`` straight through aiohttp (no httpx objects); the reply read, bounded.

        The body is streamed and decoded (gzip/deflate) up to :func:`body_limit` bytes; past it
        the connection is dropped and the reply comes back with ``complete=False``.
        No timers of aiohttp's own: the caller bounds the whole exchange (``JsonEndpoint`` wraps
        each attempt in ``asyncio.timeout``), which also bounds connecting and every read.
        Measured: aiohttp's per-read timer, re-armed on every chunk, and its connect timer were
        ~7% of a busy worker's event-loop CPU. Pass ``url`` as a ``yarl.URL`` to skip parsing it
        on every request.
        """
        session = await self._current_session()
        try:  # not _aiohttp_errors(): a generator context manager per request costs more
            async with session.post(
                url, data=body, headers=headers, allow_redirects=False, timeout=_NO_TIMERS
            ) as response:
                limit = body_limit(response.status, max_reply_bytes)
                try:
                    content = await read_bounded(
                        response.content.iter_any(), response.headers, limit
                    )
                except BodyTooLarge:
                    response.close()  # never drain (or reuse) a connection past the limit
                    return Reply(response.status, response.headers, b"", complete=False)
                return Reply(response.status, response.headers, content)
        except (aiohttp.ClientError, OSError) as exc:  # OSError covers TimeoutError in 3.11
            raise _as_httpx_error(exc) from None

    async def aclose(self) -> None:
        """Close the session (from its own loop, or after that loop has ended)."""
        session, loop = self._session, self._loop
        self._session = self._loop = None
        if session is None or session.closed or loop is None:
            return
        if loop.is_closed() or asyncio.get_running_loop() is loop:
            await session.close()


def default_client(*, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> httpx.AsyncClient:
    """The judges' default client: httpx API, aiohttp pool. Build once, reuse for every request."""
    return httpx.AsyncClient(
        transport=AiohttpTransport(max_connections=max_connections),
        trust_env=False,
        follow_redirects=False,
    )


def check_base_url(url: str) -> str:
    """``url`` without trailing ``/``; must be an absolute http(s) URL with a host (ValueError)."""
    if not isinstance(url, str):
        raise ValueError("base_url must be a string")  # noqa: TRY004 - API: bad arguments are ValueError
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        # urlsplit silently drops tabs and newlines, and a space would only fail at request time.
        raise ValueError("base_url must not contain whitespace or control characters")
    trimmed = url.rstrip("/")
    try:
        parts = urlsplit(trimmed)
        host, _port = parts.hostname, parts.port
    except ValueError:
        raise ValueError("base_url is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError("base_url must be an absolute http(s) URL with a host")
    if parts.query or parts.fragment or "?" in trimmed or "#" in trimmed:
        raise ValueError("base_url must not have a query or fragment (paths are appended)")
    if parts.username is not None or parts.password is not None:
        raise ValueError("base_url must not carry credentials (pass api_key instead)")
    return trimmed


def check_api_key(api_key: object) -> str:
    """The stripped key; ValueError (never quoting it) unless non-empty printable ASCII, no spaces.

    Anything else could split or corrupt the header, and a header error might then quote the key.
    """
    key = api_key.strip() if isinstance(api_key, str) else ""
    if not key or not all("!" <= ch <= "~" for ch in key):
        raise ValueError("api_key must be a non-empty printable ASCII string without spaces")
    return key


# --- error translation --------------------------------------------------------------------------


def is_retryable_status(status: int) -> bool:
    """408, 429 and every 5xx (529 "overloaded" included) are transient."""
    return status in (408, 429) or 500 <= status <= 599


def _text_of(value: object) -> str | None:
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list):  # FastAPI-style 422: {"detail": [{"msg": ...}, ...]}
        parts = [v["msg"] for v in value if isinstance(v, dict) and isinstance(v.get("msg"), str)]
        return "; ".join(parts) or None
    return None


def _find_message(body: object, *, nested: bool = True) -> str | None:
    if not isinstance(body, dict):
        return None
    for key in ("message", "error", "detail"):
        if (text := _text_of(body.get(key))) is not None:
            return text
    inner = body.get("error")
    return _find_message(inner, nested=False) if nested and isinstance(inner, dict) else None


def _body_message(content: bytes) -> str | None:
    if not content or len(content) > ERROR_BODY_CAP:
        return None
    try:
        return _find_message(json.loads(content))
    except (ValueError, RecursionError):
        return None


def sanitize(text: str, secrets: tuple[str, ...]) -> str:
    """Redact secrets and bearer tokens, flatten to one line, cap the length."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = _BEARER.sub("Bearer ***", text)
    text = " ".join(_CONTROL.sub(" ", text).split())
    return text if len(text) <= MESSAGE_CAP else text[: MESSAGE_CAP - 1] + "…"


def error_message(service: str, status: int, content: bytes, secrets: tuple[str, ...]) -> str:
    """``"<service> request failed with HTTP n[: message from the body]"``, sanitized."""
    message = f"{service} request failed with HTTP {status}"
    detail = _body_message(content)
    return sanitize(f"{message}: {detail}" if detail else message, secrets)


@contextlib.contextmanager
def translated_errors(service: str) -> Iterator[None]:
    """Turn transport exceptions into :class:`JudgeError` (type names only: no text, no chain)."""
    try:
        yield
    except (TimeoutError, httpx.TimeoutException):
        raise JudgeError(f"{service} request timed out", retryable=True) from None
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise JudgeError(f"{service} request is invalid ({type(exc).__name__})") from None
    except (httpx.TransportError, aiohttp.ClientError, OSError) as exc:
        name = type(exc).__name__
        raise JudgeError(f"{service} transport error ({name})", retryable=True) from None
    except httpx.HTTPError as exc:  # decoding errors, too many redirects: not transient
        raise JudgeError(f"{service} request failed ({type(exc).__name__})") from None


# --- retries --------------------------------------------------------------------------------------


def parse_retry_after(headers: Mapping[str, str], now_s: float | None = None) -> float | None:
    """Seconds from ``retry-after-ms`` or ``Retry-After`` (delta-seconds or HTTP-date) or None."""
    if (millis := _seconds(headers.get("retry-after-ms"))) is not None:
        return millis / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    if (seconds := _seconds(value)) is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is always GMT; a naive parse means the zone was "-0000"
        return None
    return max(0.0, when.timestamp() - (time.time() if now_s is None else now_s))


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


@dataclass(frozen=True)
class RetryPolicy:
    """How hard an HTTP judge tries; the evaluator's deadline caps all of it.

    Defaults follow the AgentScope client: 3 attempts, 0.5 s backoff doubling up to 4 s.
    ``Retry-After`` replaces the backoff; one longer than ``retry_after_cap_s`` ends the retries.
    """

    attempts: int = 3
    attempt_timeout_s: float = 10.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 4.0
    backoff_jitter_s: float = 0.1
    retry_after_cap_s: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be >= 1")
        durations = (self.attempt_timeout_s, self.backoff_initial_s, self.backoff_max_s)
        if not all(math.isfinite(d) and d > 0 for d in durations):
            raise ValueError("attempt timeout and backoff durations must be finite and > 0")
        others = (self.backoff_jitter_s, self.retry_after_cap_s)
        if not all(math.isfinite(d) and d >= 0 for d in others):
            raise ValueError("jitter and retry_after cap must be finite and >= 0")

    def backoff_s(self, failures: int) -> float:
        """Exponential backoff after the ``failures``-th failure (1-based), with jitter."""
        base = min(self.backoff_max_s, self.backoff_initial_s * 2.0 ** (failures - 1))
        return base + random.uniform(0, self.backoff_jitter_s)


class _RetryPlan:
    """Per call: the stamina backoff hook that decides whether, and how long, to wait."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._failures = 0
        self.retry_after_s: float | None = None  # set by the attempt that saw the header

    def __call__(self, exc: Exception) -> bool | float:
        self._failures += 1
        retry_after, self.retry_after_s = self.retry_after_s, None
        if not isinstance(exc, JudgeError) or not exc.retryable:
            return False
        if retry_after is not None and retry_after > self._policy.retry_after_cap_s:
            return False  # waiting less than the server asks would only be refused again
        wait_s = self._policy.backoff_s(self._failures) if retry_after is None else retry_after
        left_s = remaining_s()
        if left_s is not None and wait_s >= left_s:
            return False  # never sleep into (or past) the evaluator's deadline
        return wait_s


class JsonEndpoint:
    """POST JSON to one URL with retries inside the budget; returns the 2xx body as bytes.

    Reply bodies are read bounded (``worker.judges._body``): a 2xx body past
    ``max_reply_bytes`` (decoded) is :class:`InvalidReply` (``INVALID_RESPONSE``, not retried);
    an error body past :data:`ERROR_BODY_CAP` is dropped and the error keeps only its status.
    """

    def __init__(
        self,
        url: str,
        *,
        service: str,
        headers: Mapping[str, str],
        client: httpx.AsyncClient | None,
        policy: RetryPolicy,
        secrets: tuple[str, ...] = (),
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        if max_reply_bytes < 1:
            raise ValueError("max_reply_bytes must be >= 1")
        self.url = url
        self._max_reply_bytes = max_reply_bytes
        self._yarl_url = yarl.URL(url)  # parsed once, not per request
        self._service = service
        self._headers = MappingProxyType({"Accept-Encoding": ACCEPT_ENCODING, **headers})
        self._owns_client = client is None
        self._client = client  # None: post through our own aiohttp transport (module docstring)
        # The endpoint's headers are its session's defaults: aiohttp merges per-request headers
        # into the defaults in Python, copying the defaults alone is one C call (measured: the
        # merge was ~1.7% of a busy worker's event-loop time).
        self._transport = AiohttpTransport(headers=self._headers) if client is None else None
        self._closed = False
        self._policy = policy
        self._secrets = secrets

    def __repr__(self) -> str:
        return f"JsonEndpoint(url={self.url!r})"

    async def post(self, body: bytes) -> bytes:
        """The body of the first 2xx reply; :class:`JudgeError` once retries are exhausted.

        The first attempt runs outside stamina: most calls succeed at once, and building a retry
        context per call was ~6% of a busy worker's CPU (measured). A failed first attempt is
        handed to stamina as its own first attempt (re-raised there), so the backoff hook,
        the attempt count, the waits and stamina's retry hooks and testing mode are exactly
        those of a call that entered stamina from the start.
        """
        if self._closed or (self._client is not None and self._client.is_closed):
            raise JudgeError(f"{self._service} client is closed")  # not httpx's bare RuntimeError
        plan = _RetryPlan(self._policy)
        try:
            return await self._attempt(body, plan)
        except Exception as exc:  # noqa: BLE001 - stamina's hook decides, as for any attempt
            failure = exc
        return await self._retried(body, plan, failure)

    async def _retried(self, body: bytes, plan: _RetryPlan, first: Exception) -> bytes:
        """Attempts after a failed first one, driven by stamina (``first`` replayed first)."""
        failure: Exception | None = first
        retries = stamina.retry_context(
            on=plan,
            attempts=self._policy.attempts,
            timeout=None,  # the evaluator's deadline is the only clock that matters
            wait_initial=self._policy.backoff_initial_s,
            wait_max=self._policy.backoff_max_s,
            wait_jitter=self._policy.backoff_jitter_s,
        )
        async for attempt in retries:
            with attempt:
                if failure is not None:
                    replayed, failure = failure, None
                    raise replayed
                return await self._attempt(body, plan)
        raise AssertionError("unreachable: stamina either returns or raises")

    def _attempt_timeout_s(self) -> float:
        left_s = remaining_s()
        if left_s is None:
            return self._policy.attempt_timeout_s
        if left_s <= 0:
            raise JudgeError(f"{self._service} deadline reached before the request")
        return min(self._policy.attempt_timeout_s, left_s)

    async def _attempt(self, body: bytes, plan: _RetryPlan) -> bytes:
        timeout_s = self._attempt_timeout_s()
        with translated_errors(self._service):
            async with asyncio.timeout(timeout_s):  # a total bound: read timeouts are per chunk
                reply = await self._send(body, timeout_s)
        if 200 <= reply.status < 300:
            if not reply.complete:
                raise InvalidReply(None, None)  # too large or undecodable: no usable reply
            return reply.content
        plan.retry_after_s = parse_retry_after(reply.headers)
        message = error_message(self._service, reply.status, reply.content, self._secrets)
        raise JudgeError(message, status=reply.status, retryable=is_retryable_status(reply.status))

    async def _send(self, body: bytes, timeout_s: float) -> Reply:
        if self._transport is not None:
            return await self._transport.post(
                self._yarl_url, body, max_reply_bytes=self._max_reply_bytes
            )
        assert self._client is not None  # one of the two is always set
        request = self._client.build_request(
            "POST", self.url, content=body, headers=self._headers, timeout=timeout_s
        )
        # Raw bytes, decoded here within the limit: httpx would inflate each chunk whole.
        response = await self._client.send(request, stream=True)
        try:
            limit = body_limit(response.status_code, self._max_reply_bytes)
            content = await read_bounded(response.aiter_raw(), response.headers, limit)
        except BodyTooLarge:
            return Reply(response.status_code, response.headers, b"", complete=False)
        finally:
            await response.aclose()
        return Reply(response.status_code, response.headers, content)

    async def aclose(self) -> None:
        """Close the client if this endpoint built it (an injected client stays open)."""
        self._closed = self._owns_client
        if self._transport is not None:
            await self._transport.aclose()
