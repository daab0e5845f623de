"""bench/lanes.py's tables: the curve names every drain's ERROR results beside its rate; the
jevals row says what even an ideal worker would read against jevals."""

from __future__ import annotations

from bench._kit import Drain
from bench.lanes import Baselines, Point, StoreRun, curve_table, store_rows


def _point(rate: float, errors: dict[str, int] | None = None) -> Point:
    drain = Drain(rate, 100, 100, 2.0, 1.0, 300.0, 10.0)
    return Point(drain, errors or {})


def test_a_curve_row_shows_the_timeout_results_of_its_drains() -> None:
    """A C whose L=1 s drain recorded TIMEOUT results says so in its row; a clean row does not."""
    run = StoreRun("sqlite")
    run.x0 = {1024: _point(300.0), 2048: _point(290.0)}
    run.slow = {1024: _point(280.0), 2048: _point(200.0, {"TIMEOUT": 160})}
    rows = {line.split()[0]: line for line in curve_table(run).splitlines()[3:]}
    assert rows["2048"].endswith("L=1s ERROR results {'TIMEOUT': 160} (not in the rate)")
    assert "ERROR" not in rows["1024"]


def test_the_jevals_row_says_what_an_ideal_worker_would_read() -> None:
    """jevals at 55/s: the row notes that the ideal 256/s is 4.65x jevals (5x is out of reach)."""
    run = StoreRun("sqlite")
    run.slow = {256: _point(249.4)}
    noop = Drain(1600.0, 100, 100, 0.5, 1.0, 300.0, 10.0)
    base = Baselines(noop, noop, {(256, 1000.0): (55.0, "jevals 0.1.4")})
    (row,) = [r for r in store_rows(run, base) if r.figure == "sqlite live C256 L1s/jevals"]
    assert not row.passed
    assert row.note.endswith("jevals 0.1.4; the ideal C/L (256/s) is 4.65x jevals")
