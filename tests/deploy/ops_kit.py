"""Helpers for the deployment tests: read compose.yaml, run its commands locally, start Flower.

Docker is not available on these machines, so each compose command is run here as a plain
subprocess with the same argv; only host-specific values (bind address, port, in-container paths)
are substituted, and each substitution is explicit in :func:`localize`.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import redis
import yaml
from redis.backoff import NoBackoff
from redis.retry import Retry

from worker.embedded import free_port

__all__ = [
    "BIN",
    "COMPOSE",
    "OPS",
    "ROOT",
    "Service",
    "child_env",
    "compose",
    "env_example",
    "env_file",
    "flower",
    "get",
    "localize",
    "promtool",
    "quick_redis",
    "run_check",
    "service",
    "started",
    "stop",
    "wait_until",
]

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "ops"
COMPOSE = ROOT / "compose.yaml"
BIN = Path(sys.executable).parent
"""The venv's bin directory: ``evalq``, ``celery`` and (after install-promtool.sh) ``promtool``."""


def compose() -> dict[str, Any]:
    """compose.yaml parsed (YAML merge keys resolved)."""
    doc = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def env_file(name: str) -> dict[str, str]:
    """``ops/<name>`` as a mapping (comments and blank lines skipped)."""
    pairs: dict[str, str] = {}
    for line in (OPS / name).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def env_example() -> dict[str, str]:
    """ops/broker.env.example and ops/evalq.env.example together (what a worker receives)."""
    return env_file("broker.env.example") | env_file("evalq.env.example")


class Service:
    """One compose service: its argv (entrypoint + command, ``$$`` unescaped) and healthcheck."""

    IMAGE_ENTRYPOINT = ("evalq",)
    """ENTRYPOINT of ops/Dockerfile, used when a service built from it sets none."""

    def __init__(self, name: str, spec: Mapping[str, Any]) -> None:
        self.name = name
        self.spec = spec

    @property
    def built_here(self) -> bool:
        """True when the service runs the image of ops/Dockerfile."""
        return "build" in self.spec

    @property
    def argv(self) -> list[str]:
        """What the container executes."""
        entry = self.spec.get("entrypoint")
        if entry is None:
            entry = list(self.IMAGE_ENTRYPOINT) if self.built_here else []
        command = self.spec.get("command") or []
        return [_unescape(part) for part in [*_as_list(entry), *_as_list(command)]]

    @property
    def healthcheck(self) -> list[str] | None:
        """The healthcheck test as argv (``CMD-SHELL`` becomes ``/bin/sh -c``)."""
        test = (self.spec.get("healthcheck") or {}).get("test")
        if not test:
            return None
        kind, *rest = [_unescape(part) for part in test]
        return ["/bin/sh", "-c", rest[0]] if kind == "CMD-SHELL" else rest


def service(name: str) -> Service:
    """The compose service called ``name``."""
    return Service(name, compose()["services"][name])


def _as_list(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _unescape(text: str) -> str:
    # Compose turns `$$` into a literal `$` for the container's shell.
    return text.replace("$$", "$")


def localize(argv: Sequence[str], replacements: Mapping[str, str]) -> list[str]:
    """``argv`` with each ``old`` substring replaced by ``new`` (host paths, ports, addresses)."""
    out = []
    for part in argv:
        text = part
        for old, new in replacements.items():
            text = text.replace(old, new)
        out.append(text)
    return out


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment plus ``extra``, with the venv's bin first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALQ_", "FLOWER_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def started(argv: Sequence[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own process group, output to ``log``."""
    with log.open("ab") as sink:
        return subprocess.Popen(
            list(argv), env=dict(env), stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM the process (it is PID 1 of its command, as in a container), then SIGKILL."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


def wait_until(check: Any, timeout_s: float, what: str, interval_s: float = 0.1) -> Any:
    """Poll ``check()`` until it returns a truthy value (bounded); fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def get(url: str, auth: tuple[str, str] | None = None, timeout_s: float = 5.0) -> tuple[int, str]:
    """GET ``url`` → (status, body); HTTP errors are returned, not raised."""
    headers = {}
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status), response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", "replace")


def _answers(url: str) -> bool:
    with contextlib.suppress(OSError):
        get(url, timeout_s=1.0)
        return True
    return False


@contextlib.contextmanager
def flower(
    broker_url: str, log: Path, *, user: str = "ops", password: str = "s3cret-flower"
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run compose's Flower command on a free loopback port; yields (base_url, process).

    The compose shell string is executed by ``/bin/sh -c`` exactly as in the container, with
    ``EVALQ_BROKER_URL``/``FLOWER_BASIC_AUTH`` in its environment (as from ops/broker.env).
    """
    port = free_port()
    argv = localize(
        service("flower").argv, {"--address=0.0.0.0": "--address=127.0.0.1", "5555": str(port)}
    )
    env = child_env({"EVALQ_BROKER_URL": broker_url, "FLOWER_BASIC_AUTH": f"{user}:{password}"})
    process = started(argv, env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: process.poll() is not None or _answers(base + "/healthcheck"), 30, "flower"
        )
        assert process.poll() is None, log.read_text(errors="replace")[-2000:]
        yield base, process
    finally:
        stop(process)


def promtool() -> str | None:
    """Path of promtool (PATH or the venv's bin; see ops/install-promtool.sh), or None."""
    return shutil.which("promtool") or shutil.which("promtool", path=str(BIN))


def quick_redis(url: str | None = None, **kwargs: Any) -> redis.Redis:
    """A Redis client that fails at once instead of in redis-py's default ~4 s of retries."""
    options: dict[str, Any] = {"socket_connect_timeout": 1, "retry": Retry(NoBackoff(), 0)}
    options |= kwargs
    return redis.Redis.from_url(url, **options) if url else redis.Redis(**options)


def run_check(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run a health-check style command (bounded, output captured); its exit status."""
    result = subprocess.run(
        list(argv),
        env=None if env is None else dict(env),
        capture_output=True,
        timeout=30,
        check=False,
    )
    return result.returncode
