"""``evalq ui`` over real HTTP: the token rule, bounded pages, reason codes, nothing written."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By

from tests.queue.queue_kit import worker_env
from tests.store._store_helpers import dump_tables
from tests.ui.ui_kit import Filled, UiServer, chrome, evalq_command, shown, ui_server
from worker.reporting import ReportScope, build_report
from worker.store import ResultFilter, open_store
from worker.ui import Access, UiConfigError, is_loopback
from worker.ui._pages import Numbers

TOKEN = "ui-test-token-0123456789"


@pytest.fixture(scope="module")
def token_ui(filled: Filled, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    """``evalq ui`` on loopback with ``EVALQ_UI_TOKEN`` set."""
    log = tmp_path_factory.mktemp("ui-token") / "ui.log"
    with ui_server(filled.store_url, log, token=TOKEN) as server:
        yield server


def _ui(*args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*evalq_command(), "ui", *args],
        env=worker_env(**settings),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_non_loopback_host_without_token_is_refused(filled: Filled) -> None:
    """Binding beyond loopback without EVALQ_UI_TOKEN: one line naming it, exit status 2."""
    done = _ui("--host", "0.0.0.0", "--port", "1", store_url=filled.store_url)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("EVALQ_UI_TOKEN: required to serve on 0.0.0.0")
    assert "Traceback" not in done.stderr + done.stdout


def test_a_short_token_is_refused(filled: Filled) -> None:
    """A token shorter than 16 characters is refused at start (exit 2), and not echoed."""
    done = _ui("--host", "0.0.0.0", store_url=filled.store_url, ui_token="short")
    assert done.returncode == 2
    assert "EVALQ_UI_TOKEN: too short" in done.stderr
    assert "short\n" not in done.stderr.replace("too short", "")


def test_missing_store_is_one_line(tmp_path: Path) -> None:
    """A SQLite store that is not there is refused (NO_STORE), not created empty."""
    url = f"sqlite:///{tmp_path / 'absent.db'}"
    done = _ui(store_url=url)
    assert done.returncode == 2
    assert "(NO_STORE)" in done.stderr
    assert not (tmp_path / "absent.db").exists()


def test_token_guards_every_page(token_ui: UiServer) -> None:
    """No token → redirected to the login; a wrong bearer too; the right bearer → the page."""
    with httpx.Client(base_url=token_ui.base_url, follow_redirects=False) as client:
        for path in ("/", "/metrics/grounded", "/records/abc"):
            refused = client.get(path)
            assert refused.status_code == 303
            assert refused.headers["location"].startswith("/login?next=")
        wrong = client.get("/", headers={"Authorization": "Bearer not-the-token-at-all"})
        assert wrong.status_code == 303
        right = client.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
        assert right.status_code == 200
        assert 'id="metrics"' in right.text
        bad_login = client.post("/login", data={"token": "nope", "next": "/"})
        assert bad_login.status_code == 401
        assert "BAD_TOKEN" in bad_login.text
        assert "nope" not in bad_login.text
        for elsewhere in ("//evil.example/", "/\t/evil.example", "/\\evil.example", "https://x"):
            away = client.post("/login", data={"token": TOKEN, "next": elsewhere})
            assert (away.status_code, away.headers["location"]) == (303, "/"), elsewhere
        good = client.post(
            "/login", data={"token": TOKEN, "next": "/metrics/grounded?status=ERROR"}
        )
        assert (good.status_code, good.headers["location"]) == (
            303,
            "/metrics/grounded?status=ERROR",
        )
        cookie = good.headers["set-cookie"]
        assert "httponly" in cookie.lower()
        assert "samesite=strict" in cookie.lower()
        assert TOKEN not in cookie
    assert TOKEN not in token_ui.log


def test_browser_logs_in_with_the_token(token_ui: UiServer) -> None:
    """In Chromium: the login form refuses a wrong token, then the right one opens the page."""
    with chrome() as driver:
        driver.get(token_ui.base_url + "/metrics/grounded?status=DECIDED")
        assert driver.find_elements(By.CSS_SELECTOR, "#login")
        driver.find_element(By.ID, "token").send_keys("wrong-token-wrong-token")
        driver.find_element(By.ID, "login-submit").click()
        assert "BAD_TOKEN" in shown(driver, "#refused").text
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "login-submit").click()
        assert shown(driver, "#metric-title").text == "grounded"
        assert driver.current_url.endswith("/metrics/grounded?status=DECIDED")


def test_pages_walk_every_result_once(open_ui: UiServer, filled: Filled) -> None:
    """Following "older" links with two rows a page lists each result of the metric once."""
    with open_store(filled.store_url) as store:
        everything, _ = store.result_list(ResultFilter(metric_id="grounded"), limit=500)
    seen: list[str] = []
    url: str | None = "/metrics/grounded?limit=2"
    with httpx.Client(base_url=open_ui.base_url) as client:
        while url is not None:
            page = client.get(url)
            assert page.status_code == 200
            rows = re.findall(r'href="/records/([0-9a-f]{64})\?metric=grounded"', page.text)
            assert len(rows) <= 2
            seen.extend(rows)
            older = re.search(r'id="next-page" href="([^"]+)"', page.text)
            url = older.group(1).replace("&amp;", "&") if older else None
    assert seen == [r.evaluation_id for r in everything]


def test_bad_input_is_a_reason_code_never_echoed(open_ui: UiServer) -> None:
    """Bad filters are 400 with a code; an unknown record is 404; no input comes back."""
    with httpx.Client(base_url=open_ui.base_url) as client:
        bad = client.get("/metrics/grounded", params={"since": "<i>yesterday</i>"})
        assert bad.status_code == 400
        assert "BAD_QUERY since BAD_TIME" in bad.text
        assert "yesterday" not in bad.text
        for params in ({"status": "FINE"}, {"passed": "maybe"}, {"limit": "100000"}):
            assert client.get("/metrics/grounded", params=params).status_code == 400
        missing = client.get("/records/" + "0" * 64)
        assert missing.status_code == 404
        assert "NOT_FOUND" in missing.text
        assert "default-src 'none'" in missing.headers["content-security-policy"]
    assert "Traceback" not in open_ui.log


def test_filters_narrow_the_overview(open_ui: UiServer, filled: Filled) -> None:
    """A metric-set version filter counts only that version's evaluations (the re-run: one)."""
    with open_store(filled.store_url) as store:
        versions = [e.metric_set_version for e in store.iter_evaluation_rows()]
    latest = versions[-1]
    with httpx.Client(base_url=open_ui.base_url) as client:
        page = client.get("/", params={"metric_set_version": latest})
    shown = re.search(r'id="evaluations">(\d+)<', page.text)
    assert shown is not None
    assert shown.group(1) == str(versions.count(latest))


def test_browsing_writes_nothing(open_ui: UiServer, filled: Filled) -> None:
    """Every table is byte-for-byte the same after the pages were read."""
    before = dump_tables(filled.store_url)
    with open_store(filled.store_url) as store:
        rows, _ = store.result_list(ResultFilter(metric_id="grounded"), limit=5)
    with httpx.Client(base_url=open_ui.base_url) as client:
        for path in ("/", "/metrics/grounded", *(f"/records/{r.evaluation_id}" for r in rows)):
            assert client.get(path).status_code == 200
    assert dump_tables(filled.store_url) == before


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("evalq.internal", False),
        ("localhost.example.com", False),
    ],
)
def test_only_loopback_addresses_may_serve_without_a_token(host: str, loopback: bool) -> None:
    """Loopback is 127.0.0.0/8, ::1 and ``localhost``; any other host needs the token."""
    assert is_loopback(host) is loopback
    if loopback:
        assert Access.for_host(host, None).open
    else:
        with pytest.raises(UiConfigError, match="EVALQ_UI_TOKEN: required"):
            Access.for_host(host, None)
        assert not Access.for_host(host, TOKEN).open


def test_overview_numbers_are_the_reports(filled: Filled) -> None:
    """The overview's grouped counts equal ``evalq report --pool-versions`` per metric."""
    # The fill has two metric-set versions; the report's default shows the newest one and both
    # side by side.
    with open_store(filled.store_url) as store:
        report = build_report(store, ReportScope(pool_versions=True))
        side_by_side = build_report(store, ReportScope())
        numbers = Numbers(store).get(None)
    assert not report.weighted  # every snapshot of the fill has weight 1
    assert numbers.metrics == report.metrics
    first, second = sorted(side_by_side.versions, key=lambda v: v.last_evaluated_at or 0)
    assert (first.evaluations, second.evaluations) == (report.evaluations - 1, 1)
    assert side_by_side.metrics_version == second.metric_set_version  # the re-run's version
    assert side_by_side.metrics != report.metrics  # one version's numbers, not both pooled
    assert (numbers.snapshots, numbers.evaluations) == (report.snapshots, report.evaluations)
