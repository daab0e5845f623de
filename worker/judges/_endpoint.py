"""A judge's endpoint: one URL posted JSON with retries inside the budget; errors translated.

This is the *only* module that turns httpx (and aiohttp) exceptions into :class:`JudgeError`,
and the one that checks base URLs and API keys. Error messages are for logs: sanitized (keys and
bearer tokens redacted), one line, short.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from urllib.parse import urlsplit

import aiohttp
import httpx
import stamina
import yarl

from ._body import ACCEPT_ENCODING, BodyTooLarge, read_bounded
from ._deadline import remaining_s
from ._errors import InvalidReply, JudgeError
from ._retry import RetryPlan, RetryPolicy, is_retryable_status, parse_retry_after
from ._transport import (
    DEFAULT_MAX_REPLY_BYTES,
    ERROR_BODY_CAP,
    AiohttpTransport,
    Reply,
    body_limit,
)

__all__ = [
    "JsonEndpoint",
    "check_api_key",
    "check_base_url",
    "error_message",
    "sanitize",
    "translated_errors",
]

MESSAGE_CAP = 200  # error messages are for logs: short, one line
_BEARER = re.compile(r"(?i)bearer\s+\S+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


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


class JsonEndpoint:
    """POST JSON to one URL with retries inside the budget; returns the 2xx body as bytes.

    Reply bodies are read bounded (``worker.judges._body``): a 2xx body past
    ``max_reply_bytes`` (decoded) is :class:`InvalidReply` (``INVALID_RESPONSE``, not retried);
    an error body past :data:`ERROR_BODY_CAP` is dropped and the error keeps only its status.
    ``on_response`` is called with the status of every HTTP response, retried attempts included
    (the worker counts them: ``evalq_judge_http_responses_total``, the 429 ratio's source).
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
        on_response: Callable[[int], None] | None = None,
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
        self._on_response = on_response

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
        plan = RetryPlan(self._policy)
        try:
            return await self._attempt(body, plan)
        except Exception as exc:  # noqa: BLE001 - stamina's hook decides, as for any attempt
            failure = exc
        return await self._retried(body, plan, failure)

    async def _retried(self, body: bytes, plan: RetryPlan, first: Exception) -> bytes:
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

    async def _attempt(self, body: bytes, plan: RetryPlan) -> bytes:
        timeout_s = self._attempt_timeout_s()
        with translated_errors(self._service):
            async with asyncio.timeout(timeout_s):  # a total bound: read timeouts are per chunk
                reply = await self._send(body, timeout_s)
        if self._on_response is not None:
            self._on_response(reply.status)
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
