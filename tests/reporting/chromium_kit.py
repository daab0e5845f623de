"""Headless Chromium driven over the DevTools protocol on a pipe (no extra dependency).

``--remote-debugging-pipe`` makes Chromium read protocol commands from fd 3 and write replies
and events to fd 4, NUL-separated JSON. :class:`Chromium` opens a page, collects every console
message, uncaught exception and log entry (failed loads included), evaluates expressions in the
page and captures full-page screenshots. The browser runs with a fresh profile and no network
helpers, and is killed (whole process group) when the context ends.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import service_missing

__all__ = ["CHROMIUM_FLAGS", "Chromium", "PageRun", "chromium_binary", "open_chromium"]

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)
_PROBLEM_EVENTS = ("Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded")


def chromium_binary() -> str:
    """The ``chromium`` executable (fails under CI=true, skips elsewhere, when missing)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        service_missing("chromium", "apt-get install -y chromium (Debian package)")
    assert found is not None
    return found


def _high_pipe() -> tuple[int, int]:
    """A pipe whose fds are >= 10, so putting them on 3 and 4 in the child cannot collide."""
    ends = []
    for fd in os.pipe():
        ends.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10))
        os.close(fd)
    return ends[0], ends[1]


@dataclass
class PageRun:
    """What one page load produced."""

    url: str
    problems: list[dict[str, Any]] = field(default_factory=list)


class Chromium:
    """One browser process and one attached page session."""

    def __init__(self, binary: str, profile: Path, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        cmd_read, self._cmd = _high_pipe()
        self._events, reply_write = _high_pipe()

        def wire_fds() -> None:  # in the child: the protocol fds must be exactly 3 and 4
            os.dup2(cmd_read, 3)
            os.dup2(reply_write, 4)

        self.process = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire_fds,  # noqa: PLW1509 - a test helper, no threads fork here
            pass_fds=(3, 4),  # kept open (and inheritable) across close_fds after wire_fds
            start_new_session=True,
        )
        os.close(cmd_read)
        os.close(reply_write)
        self._buffer = b""
        self._next_id = 0
        self._pending: list[dict[str, Any]] = []
        self.session = self._attach()

    # --- protocol ------------------------------------------------------------------------------

    def _read_message(self, deadline: float) -> dict[str, Any]:
        selector = selectors.DefaultSelector()
        selector.register(self._events, selectors.EVENT_READ)
        try:
            while b"\0" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    pytest.fail("Chromium did not answer over the DevTools pipe in time")
                chunk = os.read(self._events, 1 << 20)
                if not chunk:
                    pytest.fail("Chromium closed the DevTools pipe")
                self._buffer += chunk
        finally:
            selector.close()
        raw, _, self._buffer = self._buffer.partition(b"\0")
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(
        self, method: str, params: dict[str, Any] | None = None, *, session: bool = True
    ) -> Any:
        """Send one command and return its ``result`` (events seen meanwhile are kept)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._cmd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    pytest.fail(f"DevTools {method} failed: {reply['error']}")
                return reply.get("result", {})
            self._pending.append(reply)

    def wait_event(self, method: str) -> dict[str, Any]:
        """The next event named ``method`` (earlier events stay collected)."""
        deadline = time.monotonic() + self.timeout_s
        for index, event in enumerate(self._pending):
            if event.get("method") == method:
                return self._pending.pop(index)
        while True:
            event = self._read_message(deadline)
            if event.get("method") == method:
                return event
            self._pending.append(event)

    def _attach(self) -> str:
        targets = self.call("Target.getTargets", session=False)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        attached = self.call(
            "Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}, session=False
        )
        session: str = attached["sessionId"]
        return session

    # --- page ----------------------------------------------------------------------------------

    def load(self, url: str) -> PageRun:
        """Navigate to ``url``, wait for ``load``, and return the problems the page reported."""
        self._pending.clear()
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable")
        self.call("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")
        self.evaluate("new Promise(r => requestAnimationFrame(() => r(true)))")
        run = PageRun(url=url)
        run.problems = [e for e in self._pending if e.get("method") in _PROBLEM_EVENTS]
        return run

    def evaluate(self, expression: str) -> Any:
        """Evaluate ``expression`` in the page (promises awaited) and return its JSON value."""
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            pytest.fail(f"page expression failed: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def screenshot(
        self, path: Path, width: int = 1000, max_height: int | None = None
    ) -> tuple[int, int]:
        """Full-page PNG at ``width`` CSS pixels (cut at ``max_height``); returns its size."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": False},
        )
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        height = min(height, max_height) if max_height else height
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        shot = self.call("Page.captureScreenshot", {"format": "png"})
        path.write_bytes(base64.b64decode(shot["data"]))
        return width, height

    def close(self) -> None:
        """Ask the browser to quit, then kill its process group whatever happened."""
        with contextlib.suppress(Exception):
            self.call("Browser.close", session=False)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        os.close(self._cmd)
        os.close(self._events)


@contextlib.contextmanager
def open_chromium(timeout_s: float = 30.0) -> Iterator[Chromium]:
    """A headless Chromium with a fresh profile directory (removed afterwards)."""
    binary = chromium_binary()
    with tempfile.TemporaryDirectory(prefix="evalq-chromium-") as profile:
        browser = Chromium(binary, Path(profile), timeout_s)
        try:
            yield browser
        finally:
            browser.close()
