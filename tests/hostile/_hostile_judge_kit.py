"""A hostile judge server on 127.0.0.1 and a client process that measures its own peak RSS.

The server answers every POST by its first path segment: ``/big-ok/<n>`` and ``/big-error/<n>``
stream ``n`` bytes with status 200 or 500 (``/chunked-ok``, ``/chunked-error``: the same
without a Content-Length); ``/bomb-ok/<n>`` and ``/bomb-error/<n>`` send a gzip
body that inflates to ``n`` zero bytes; ``/slow-bomb/<n>`` sends such a bomb in small pieces,
20 ms apart; ``/trickle/<n>`` sends ``n`` bytes 1 KiB per 20 ms. The client runs in a fresh
interpreter so its ``ru_maxrss`` is its own.
"""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

__all__ = ["CLIENT_SCRIPT", "gzip_bomb", "hostile_server", "run_client"]

_CHUNK = 256 * 1024


@functools.cache
def gzip_bomb(size: int) -> bytes:
    """Gzip of ``size`` zero bytes (about 1/1000 of the size); call it before a timed test, so
    the server does not spend the budget compressing."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    zeros = bytes(_CHUNK)
    parts = [packer.compress(zeros) for _ in range(size // _CHUNK)]
    parts.append(packer.compress(bytes(size % _CHUNK)))
    parts.append(packer.flush())
    return b"".join(parts)


async def _stream(
    request: web.Request, status: int, size: int, *, chunked: bool = False
) -> web.StreamResponse:
    response = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
    if chunked:
        response.enable_chunked_encoding()  # no Content-Length: the limit must be counted
    else:
        response.content_length = size
    block = b"x" * _CHUNK
    sent = 0
    try:
        await response.prepare(request)
        while sent < size:
            piece = block[: min(_CHUNK, size - sent)]
            await response.write(piece)
            sent += len(piece)
    except (ConnectionError, RuntimeError):
        pass  # the client dropped the connection past its limit: expected
    return response


async def _bomb(
    request: web.Request, status: int, size: int, pause_s: float = 0.0
) -> web.StreamResponse:
    body = gzip_bomb(size)
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    response = web.StreamResponse(status=status, headers=headers)
    response.content_length = len(body)
    step = 4096 if pause_s else len(body)
    try:
        await response.prepare(request)
        for start in range(0, len(body), step):
            await response.write(body[start : start + step])
            if pause_s:
                await asyncio.sleep(pause_s)
    except (ConnectionError, RuntimeError):
        pass
    return response


async def _trickle(request: web.Request, size: int) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.content_length = size
    try:
        await response.prepare(request)
        for _ in range(0, size, 1024):
            await response.write(b" " * 1024)
            await asyncio.sleep(0.02)
    except (ConnectionError, RuntimeError):
        pass
    return response


async def _handle(request: web.Request) -> web.StreamResponse:
    await request.read()
    mode, _, size_text = request.path.strip("/").partition("/")
    size = int(size_text.partition("/")[0])
    if mode == "big-ok":
        return await _stream(request, 200, size)
    if mode == "big-error":
        return await _stream(request, 500, size)
    if mode == "chunked-ok":
        return await _stream(request, 200, size, chunked=True)
    if mode == "chunked-error":
        return await _stream(request, 500, size, chunked=True)
    if mode == "bomb-ok":
        return await _bomb(request, 200, size)
    if mode == "bomb-error":
        return await _bomb(request, 500, size)
    if mode == "slow-bomb":
        return await _bomb(request, 200, size, pause_s=0.02)
    if mode == "trickle":
        return await _trickle(request, size)
    return web.Response(status=404)


@contextmanager
def hostile_server() -> Iterator[str]:
    """Run the server in a thread; yield its base URL ``http://127.0.0.1:<port>``."""
    loop = asyncio.new_event_loop()
    app = web.Application(client_max_size=1024 * 1024)
    app.router.add_route("POST", "/{tail:.*}", _handle)
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.run_until_complete(runner.cleanup())
        loop.close()


CLIENT_SCRIPT = r"""
import asyncio, json, resource, sys, time
from worker.judges import InvalidReply, JudgeError
from worker.judges import RetryPolicy
from worker.judges._endpoint import JsonEndpoint
from worker.judges._transport import default_client

def peak_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

async def one(endpoint):
    try:
        await endpoint.post(b"{}")
        return "OK"
    except InvalidReply as exc:
        return exc.code
    except JudgeError as exc:
        return f"JudgeError:{exc.status}"

async def main(base, path, concurrency, limit, transport):
    client = default_client() if transport == "httpx" else None
    def endpoint(url):
        return JsonEndpoint(url, service="probe", headers={}, client=client,
                            policy=RetryPolicy(attempts=1), max_reply_bytes=limit)
    warm = endpoint(f"{base}/big-ok/16")
    await one(warm)  # imports, session and pool are warm before the baseline
    baseline = peak_kib()
    target = endpoint(f"{base}/{path}")
    started = time.monotonic()
    outcomes = await asyncio.gather(*(one(target) for _ in range(concurrency)))
    elapsed = time.monotonic() - started
    print(json.dumps({"baseline_kib": baseline, "peak_kib": peak_kib(),
                      "outcomes": outcomes, "elapsed_s": elapsed}))
    await warm.aclose(); await target.aclose()
    if client is not None:
        await client.aclose()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]))
"""


def run_client(
    base: str, path: str, *, concurrency: int, limit: int, transport: str
) -> dict[str, Any]:
    """Run :data:`CLIENT_SCRIPT` in a fresh interpreter; its JSON line as a dict."""
    args = [base, path, str(concurrency), str(limit), transport]
    done = subprocess.run(
        [sys.executable, "-c", CLIENT_SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
