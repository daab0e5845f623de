"""A TCP proxy on 127.0.0.1 that can swallow a connection's bytes, then cut it (fault tests)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

__all__ = ["BlackholeProxy"]

_CHUNK = 65536


class BlackholeProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; once ``swallow_after`` bytes went client to
    server, it accepts but drops what the client sends for ``hold_s`` (the client's writes all
    succeed), then closes that connection. Later connections are forwarded whole.

    What a broker that died, or a network path that failed, mid-stream looks like to a producer
    that does not wait for the broker's word.
    """

    def __init__(self, target: tuple[str, int], *, swallow_after: int, hold_s: float) -> None:
        self._target = target
        self._swallow_after = swallow_after
        self._hold_s = hold_s
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.swallowed = 0  # bytes dropped while blackholed
        self._tripped = threading.Event()  # only the first connection to reach the mark is cut
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._closed = False

    def __enter__(self) -> Self:
        self._spawn(self._accept_loop)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closed = True
        _close(self._listener, *self._sockets)  # shutdown wakes the threads blocked on them
        for thread in self._threads:
            thread.join(timeout=5)

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target, timeout=5)
            server.settimeout(None)
            self._sockets += [client, server]
            self._spawn(self._upstream, client, server)
            self._spawn(self._pipe, server, client)

    def _upstream(self, client: socket.socket, server: socket.socket) -> None:
        """Client to server, until the mark; then swallow for ``hold_s`` and cut both sides."""
        sent = 0
        while (data := _recv(client)) is not None:
            if self._tripped.is_set() or sent + len(data) <= self._swallow_after:
                sent += len(data)
                server.sendall(data)
                continue
            self._tripped.set()
            self._swallow(client, len(data))
            break
        _close(client, server)

    def _swallow(self, client: socket.socket, first: int) -> None:
        self.swallowed += first
        deadline = time.monotonic() + self._hold_s
        with contextlib.suppress(OSError):  # the timeout ends it, or the client's close
            while (remaining_s := deadline - time.monotonic()) > 0:
                client.settimeout(remaining_s)
                if not (data := client.recv(_CHUNK)):
                    return
                self.swallowed += len(data)

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        while (data := _recv(source)) is not None:
            try:
                sink.sendall(data)
            except OSError:
                break
        _close(source, sink)


def _recv(sock: socket.socket) -> bytes | None:
    try:
        data = sock.recv(_CHUNK)
    except OSError:
        return None
    return data or None


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()
