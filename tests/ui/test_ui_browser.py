"""``evalq ui`` in real headless Chromium: from the overview to one failed record.

Screenshots go to ``$EVALQ_TEST_UI_SCREENSHOTS`` when set (``docs/`` regenerates the README's),
else into the test's temporary directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.ui.ui_kit import (
    HOSTILE_TEXT,
    HOSTILE_TRACE,
    OUTCOME_TRACE,
    REEVALUATED_TRACE,
    Filled,
    UiServer,
    chrome,
    settle,
    shown,
)
from worker.store import ResultFilter, open_store


def _shots(tmp_path: Path) -> Path:
    chosen = os.environ.get("EVALQ_TEST_UI_SCREENSHOTS")
    where = Path(chosen) if chosen else tmp_path
    where.mkdir(parents=True, exist_ok=True)
    return where


def _text(driver: WebDriver, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def _record_url(server: UiServer, filled: Filled, trace_id: str) -> str:
    with open_store(filled.store_url) as store:
        rows, _ = store.result_list(ResultFilter(metric_id="grounded"), limit=50)
    evaluation_id = next(r.evaluation_id for r in rows if r.trace_id == trace_id)
    return f"{server.base_url}/records/{evaluation_id}?metric=grounded"


def test_overview_to_a_failed_record(open_ui: UiServer, filled: Filled, tmp_path: Path) -> None:
    """Overview numbers → the metric's failed list → one record with its evidence and answers."""
    shots = _shots(tmp_path)
    with open_store(filled.store_url) as store:
        counts = {(c.metric_id, c.status, c.passed): c.n for c in store.verdict_counts()}
    failed = counts[("grounded", "DECIDED", False)]
    assert failed > 0, counts
    with chrome() as driver:
        driver.get(open_ui.base_url + "/")
        assert _text(driver, "#evaluations") == str(filled.evaluations)
        row = driver.find_element(By.CSS_SELECTOR, 'tr[data-metric="grounded"]')
        link = row.find_element(By.CSS_SELECTOR, "a.failed-link")
        assert link.text == str(failed)
        driver.save_screenshot(str(shots / "ui-overview.png"))
        link.click()

        assert shown(driver, "#metric-title").text == "grounded"
        chip = driver.find_element(By.CSS_SELECTOR, "#status-filters a.on")
        assert chip.text == f"failed {failed}"
        verdicts = driver.find_elements(By.CSS_SELECTOR, "#records tbody td:nth-child(7)")
        assert [v.text for v in verdicts] == ["fail"] * failed
        first = driver.find_element(By.CSS_SELECTOR, "#records a.record-link")
        trace_id = first.text
        first.click()

        assert shown(driver, "#trace-id").text == trace_id
        result = driver.find_element(By.CSS_SELECTOR, "#result-grounded")
        cells = {
            c: result.find_element(By.CSS_SELECTOR, f".{c}").text for c in ("status", "verdict")
        }
        assert cells == {"status": "DECIDED", "verdict": "fail"}
        assert "per_claim" in result.find_element(By.CSS_SELECTOR, ".evidence").text
        assert "grounded.c0" in result.find_element(By.CSS_SELECTOR, ".questions").text
        assert "cutoff" in _text(driver, "#window")
        assert "invocation" in _text(driver, "#unit")
        assert "systemone" in _text(driver, "#judge")
        events = driver.find_elements(By.CSS_SELECTOR, "#events li")
        assert events, "the evidence window is shown"
        assert "judge request" in _text(driver, "#usage")
        driver.set_window_size(1400, 1800)  # the record's facts, results and evidence at once
        settle()
        driver.save_screenshot(str(shots / "ui-record.png"))


def test_record_shows_outcomes_and_re_evaluations(open_ui: UiServer, filled: Filled) -> None:
    """A linked outcome is listed on its record; a re-evaluated snapshot lists both evaluations."""
    with chrome() as driver:
        driver.get(_record_url(open_ui, filled, OUTCOME_TRACE))
        assert "refund_reversed" in _text(driver, "#outcomes")
        assert '{"amount":30}' in _text(driver, "#outcomes")
        driver.get(_record_url(open_ui, filled, REEVALUATED_TRACE))
        rows = driver.find_elements(By.CSS_SELECTOR, "#evaluations tbody tr")
        assert len(rows) == 2
        versions = {r.find_element(By.CSS_SELECTOR, "td:nth-child(2)").text for r in rows}
        assert len(versions) == 2, "two metric-set versions"


def test_hostile_trace_text_is_shown_as_text(open_ui: UiServer, filled: Filled) -> None:
    """Markup inside a trace is escaped: it appears as text and never runs."""
    with chrome() as driver:
        driver.get(_record_url(open_ui, filled, HOSTILE_TRACE))
        assert driver.title != "pwned"
        assert not driver.find_elements(By.CSS_SELECTOR, "#events img")
        shown = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#events pre")]
        assert HOSTILE_TEXT in shown
        assert driver.execute_script("return document.scripts.length") == 0


def test_record_shows_the_exact_question_texts(open_ui: UiServer, filled: Filled) -> None:
    """The record page shows each question's exact stored text, its digest and the state digest."""
    url = _record_url(open_ui, filled, OUTCOME_TRACE)
    evaluation_id = url.rsplit("/", 1)[1].split("?")[0]
    with open_store(filled.store_url) as store:
        stored = store.get_evaluation(evaluation_id)
    assert stored is not None
    grounded = next(r for r in stored.record.results if r.metric_id == "grounded")
    assert grounded.audit is not None
    with chrome() as driver:
        driver.get(url)
        section = shown(driver, "#asked-grounded")
        texts = [e.text for e in section.find_elements(By.CSS_SELECTOR, "pre.question-text")]
        assert texts == [q.text for q in grounded.audit.questions]
        assert "state.claims[0]" in texts[0]
        shown_state = section.find_element(By.CSS_SELECTOR, ".state-sha256").text
        assert shown_state == grounded.audit.state_sha256
        # the stand-in answers as "synthetic" whatever it was asked (jev-latest): the reply wins
        assert section.find_element(By.CSS_SELECTOR, ".judge-model").text == "synthetic"
        assert "reported by the judge" in section.text
