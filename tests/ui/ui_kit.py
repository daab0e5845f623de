"""A store filled by a real evaluation, an ``evalq ui`` subprocess over it, and headless Chromium.

:func:`fill` runs real workers (``python -m worker``) over a private Redis against the stand-in
judge server on loopback (:mod:`worker.judges.testing`) answering "no" (``p_yes`` 0.05), so the
judged metrics fail: the shipped examples, one example whose user text is HTML markup, one
outcome event linked to an evaluation, and a second worker with other thresholds (another
metric-set version) re-evaluating one snapshot. :class:`UiServer` starts ``evalq ui`` on a free
loopback port and waits until it answers. :func:`chrome` is Debian's chromium driven by its
chromedriver through selenium (CI=true: missing is a failure, never a skip).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from producer import OutcomeEvent, Producer, Snapshot
from producer.snapshot import Lane
from tests.conftest import service_missing
from tests.queue.queue_kit import WorkerProcess, example_snapshots, wait_until, worker_env
from tests.reporting.chromium_kit import chromium_binary
from tests.reporting.reporting_kit import EVALQ
from worker.broker import broker_transport_options
from worker.embedded import free_port
from worker.judges.testing import serve_in_thread
from worker.settings import load_settings
from worker.store import open_store

__all__ = [
    "HOSTILE_TEXT",
    "HOSTILE_TRACE",
    "OUTCOME_TRACE",
    "REEVALUATED_TRACE",
    "Filled",
    "UiServer",
    "chrome",
    "evalq_command",
    "fill",
    "settle",
    "shown",
    "ui_server",
]

HOSTILE_TRACE = "hostile-markup"
HOSTILE_TEXT = '<script>document.title="pwned"</script><img src=x onerror="document.title=1">'
OUTCOME_TRACE = "refund-ungrounded"
REEVALUATED_TRACE = "order-42"
_THRESHOLDS = ("0.2,0.8", "0.3,0.7")


@dataclass(frozen=True)
class Filled:
    """Where the filled store is and what went into it."""

    store_url: str
    db_path: Path
    evaluations: int


def _hostile(base: Snapshot) -> Snapshot:
    wire = base.wire()
    events = [dict(e) for e in wire["events"]]
    first_user = next(i for i, e in enumerate(events) if e["type"] == "user")
    events[first_user]["text"] = HOSTILE_TEXT
    return Snapshot.model_validate({**wire, "trace_id": HOSTILE_TRACE, "events": events})


def _producer(broker_url: str) -> Producer:
    config = load_settings(broker_url=broker_url)
    return Producer(broker_url, transport_options=broker_transport_options(config, broker_url))


def _worker(
    broker_url: str, store_url: str, judge_url: str, thresholds: str, log: Path
) -> WorkerProcess:
    env = worker_env(
        broker_url=broker_url,
        store_url=store_url,
        judge="systemone",
        judge_url=judge_url,
        judge_api_key="ui-test-key",
        thresholds=thresholds,
        processes="1",
    )
    worker = WorkerProcess(env, log)
    worker.wait_ready()
    return worker


@contextmanager
def _running(worker: WorkerProcess) -> Iterator[WorkerProcess]:
    try:
        yield worker
    finally:
        worker.stop()


def fill(broker_url: str, workdir: Path) -> Filled:
    """Evaluate the examples (+ one hostile) with a judge that says no; link an outcome; then
    re-evaluate one snapshot under a second metric-set version."""
    db_path = workdir / "evalq.db"
    store_url = f"sqlite:///{db_path}"
    examples = example_snapshots()
    snapshots = [*examples.values(), _hostile(examples[REEVALUATED_TRACE])]
    with (
        serve_in_thread(p_yes=0.05) as judge,
        open_store(store_url) as store,
        closing(_producer(broker_url)) as producer,
    ):
        first = _worker(broker_url, store_url, judge.base_url, _THRESHOLDS[0], workdir / "w1.log")
        with _running(first):
            producer.enqueue_many(snapshots, lane=Lane.LIVE)
            producer.outcome(
                OutcomeEvent(
                    event_id="outcome-ui-1",
                    trace_id=OUTCOME_TRACE,
                    name="refund_reversed",
                    value={"amount": 30},
                    observed_at=datetime.now(UTC),
                )
            )
            wait_until(lambda: store.count_evaluations() == len(snapshots), 60, "evaluations")
            wait_until(lambda: any(True for _ in store.iter_linked_outcomes()), 30, "the link")
        second = _worker(broker_url, store_url, judge.base_url, _THRESHOLDS[1], workdir / "w2.log")
        with _running(second):
            producer.enqueue(examples[REEVALUATED_TRACE], lane=Lane.LIVE)
            wait_until(lambda: store.count_evaluations() == len(snapshots) + 1, 60, "re-run")
    return Filled(store_url=store_url, db_path=db_path, evaluations=len(snapshots) + 1)


def evalq_command() -> list[str]:
    """The ``evalq`` console script of this environment (or ``python -m worker.cli``)."""
    return [str(EVALQ)] if EVALQ.exists() else [sys.executable, "-m", "worker.cli"]


class UiServer:
    """``evalq ui`` in its own process group; :attr:`base_url` once it answers."""

    def __init__(self, store_url: str, log_path: Path, *, token: str | None = None) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = worker_env(store_url=store_url, **({"ui_token": token} if token else {}))
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*evalq_command(), "ui", "--host", "127.0.0.1", "--port", str(self.port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def log(self) -> str:
        """What the server wrote so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Poll until the server answers HTTP; fail with its log if it exited."""

        def answers() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"evalq ui exited with {self.process.returncode}:\n{self.log}")
            try:
                httpx.get(self.base_url + "/ui.css", timeout=1.0)
            except httpx.TransportError:
                return False
            return True

        wait_until(answers, timeout_s, "evalq ui to answer")

    def stop(self) -> None:
        """SIGTERM (uvicorn shuts down), then SIGKILL the group whatever happened."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


@contextmanager
def ui_server(store_url: str, log_path: Path, *, token: str | None = None) -> Iterator[UiServer]:
    """A started, answering ``evalq ui``; stopped on exit."""
    server = UiServer(store_url, log_path, token=token)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _chromedriver() -> str:
    found = shutil.which("chromedriver")
    if found is None:
        service_missing("chromedriver", "apt-get install -y chromium-driver (Debian package)")
    assert found is not None
    return found


@contextmanager
def chrome() -> Iterator[webdriver.Chrome]:
    """Headless Chromium through chromedriver (a fresh profile; quit on exit)."""
    options = Options()
    options.binary_location = chromium_binary()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1400,1000")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=_chromedriver()))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def shown(driver: webdriver.Chrome, css: str, timeout_s: float = 15.0) -> WebElement:
    """The element once the page that has it loaded (a click's navigation is not awaited)."""
    located = expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css))
    element: WebElement = WebDriverWait(driver, timeout_s).until(located)
    return element


def settle(seconds: float = 0.2) -> None:
    """A short pause for a navigation that selenium already waited on to paint (screenshots)."""
    time.sleep(seconds)
