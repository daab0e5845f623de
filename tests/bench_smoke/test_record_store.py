"""bench/_kit.py's RecordStore: a drain's rate reads only evaluations without an ERROR result."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench._kit import RecordStore
from tests.conftest import backend_url
from tests.store._store_helpers import evaluation_record, snapshot_record
from worker.store import open_store


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_completed_times_leave_out_evaluations_with_an_error_result(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A TIMEOUT record is named by error_reasons and left out of created(completed=True)."""
    with backend_url(kind, request, tmp_path, "bench_records") as url, open_store(url) as store:
        clean, timed_out = snapshot_record("bf-clean"), snapshot_record("bf-timeout")
        full = evaluation_record(clean.snapshot_id)  # its third result is ERROR / TIMEOUT
        without_error = tuple(r for r in full.results if r.status != "ERROR")
        store.record_evaluation(full.model_copy(update={"results": without_error}), clean)
        store.record_evaluation(evaluation_record(timed_out.snapshot_id), timed_out)
        records = RecordStore(url)
        assert set(records.created("bf-")) == {"bf-clean", "bf-timeout"}
        assert set(records.created("bf-", completed=True)) == {"bf-clean"}
        assert records.error_reasons() == {"TIMEOUT": 1}
