"""The judges' HTTP transport: an aiohttp connection pool behind the httpx API, bounded replies.

Why aiohttp underneath: one worker keeps hundreds of judge requests in flight, and httpx's own
connection pool collapses past ~32 concurrent requests (measured: 48 req/s at 64 in flight against
a 100 ms server) while aiohttp's pool keeps up (see ``bench/judge_transport.py``). The transport
still speaks httpx, so callers may inject any ``httpx.AsyncClient`` instead. Without an injected
client a :class:`~worker.judges._endpoint.JsonEndpoint` posts through the aiohttp session directly
(:meth:`AiohttpTransport.post`): the httpx ``Request``/``Response`` objects around every call were
~10% of a busy worker's CPU (measured with ``py-spy`` on the P1 benchmark).

aiohttp failures leave this module as the httpx exceptions they correspond to; turning those into
:class:`~worker.judges.JudgeError` is the endpoint's job.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass

import aiohttp
import httpx
import yarl

from ._body import ACCEPT_ENCODING, BodyTooLarge, read_bounded

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_REPLY_BYTES",
    "ERROR_BODY_CAP",
    "AiohttpTransport",
    "Reply",
    "as_httpx_error",
    "body_limit",
    "default_client",
]

DEFAULT_MAX_CONNECTIONS = 1024  # far above the hundreds in flight a worker keeps
DEFAULT_MAX_REPLY_BYTES = 2 * 1024 * 1024
"""Largest decoded 2xx body a judge accepts (``INVALID_RESPONSE`` past it). A System One or
chat reply is a few KiB; the cap keeps concurrency x cap the worst case of reply memory."""
ERROR_BODY_CAP = 65_536
"""Bytes of an error reply read to find its message; past it the connection is dropped."""
_KEEPALIVE_S = 30.0


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


def as_httpx_error(exc: aiohttp.ClientError | OSError) -> httpx.TransportError:
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
        raise as_httpx_error(exc) from None


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
            raise as_httpx_error(exc) from None

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
