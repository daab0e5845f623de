"""bench/lanes.py's curve table names every drain's ERROR results beside its rate."""

from __future__ import annotations

from bench._kit import Drain
from bench.lanes import Point, StoreRun, curve_table


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
