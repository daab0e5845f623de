"""The batch write path (``record_evaluations``), the batch existence query and the fast snapshot
record constructor: same results as the one-record paths (one transaction per batch on
PostgreSQL, per SQLITE_BULK_ROWS evaluations on SQLite)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import backend_url
from tests.store._store_helpers import evaluation_record, outcome_record, snapshot_record, wire
from worker.canonical_json import canonical_json
from worker.store import (
    EvaluationRecord,
    PermanentStoreError,
    SnapshotRecord,
    SnapshotText,
    Store,
    Written,
    open_store,
)
from worker.store._backends import _copy_of
from worker.store._writes import _INSERT_EVALUATION, _INSERT_RESULT

Item = tuple[EvaluationRecord, SnapshotRecord | None]


def _scenario(store: Store) -> list[Item]:
    """Earlier state (a stored snapshot, outcomes) and a batch exercising every rule."""
    a, b, c = (
        snapshot_record("t-a"),
        snapshot_record("t-b", unit_event_id="u1"),
        snapshot_record("t-c"),
    )
    store.put_snapshot(c)  # recorded earlier: its evaluation comes without the snapshot
    store.record_outcome(outcome_record("o-a", "t-a"))  # no unit: bears on every unit of t-a
    store.record_outcome(outcome_record("o-b1", "t-b", unit_event_id="u1"))
    store.record_outcome(outcome_record("o-b2", "t-b", unit_event_id="other-unit"))
    criteria = ("refund_reversed", "complaint")  # o-a answers the first
    a1 = evaluation_record(a.snapshot_id, version="agent@1", criteria=criteria)
    a2 = evaluation_record(a.snapshot_id, version="agent@2")
    return [
        (a1, a),
        (evaluation_record(b.snapshot_id), b),
        (a2, a),  # re-evaluation inside the batch: links to a1
        (a1, a),  # duplicate inside the batch: writes nothing
        (evaluation_record(c.snapshot_id, criteria=("complaint",)), None),
    ]


def _view(store: Store, written: list[Written]) -> list[Any]:
    """What the store holds for ``written``, without the wall-clock timestamps."""
    view: list[Any] = []
    for w in written:
        stored = store.get_evaluation(w.id)
        assert stored is not None
        view.append(
            (
                w.created,
                stored.model_dump(exclude={"created_at"}),
                sorted(link.outcome.event_id for link in store.links_for_evaluation(w.id)),
                store.pending_outcomes(w.id),
            )
        )
    rows = [r.model_dump(exclude={"created_at"}) for r in store.iter_results()]
    return [view, rows, store.count_snapshots(), store.count_evaluations()]


def test_batch_applies_every_rule_of_the_single_path(store: Store) -> None:
    """Snapshots inserted, duplicates skipped, previous and outcome links, criteria kept."""
    items = _scenario(store)
    written = store.record_evaluations(items)
    assert [w.created for w in written] == [True, True, True, False, True]
    assert [w.id for w in written] == [record.evaluation_id for record, _ in items]
    a1, b1, a2, _, c1 = (store.get_evaluation(w.id) for w in written)
    assert a1 is not None
    assert b1 is not None
    assert a2 is not None
    assert c1 is not None
    assert (a1.previous_evaluation_id, a2.previous_evaluation_id) == (None, a1.evaluation_id)
    assert (a2.window_rule, a2.cutoff_event_id) == ("invocation_end", "a1")
    links = {w.id: {x.outcome.event_id for x in store.links_for_evaluation(w.id)} for w in written}
    assert links[a1.evaluation_id] == links[a2.evaluation_id] == {"o-a"}
    assert links[b1.evaluation_id] == {"o-b1"}  # o-b2 names another unit
    assert store.pending_outcomes(a1.evaluation_id) == ("complaint",)
    assert store.pending_outcomes(c1.evaluation_id) == ("complaint",)
    assert store.count_snapshots() == 3
    assert store.count_evaluations() == 4
    assert len(list(store.iter_results())) == 4 * 3
    assert [w.created for w in store.record_evaluations(items)] == [False] * 5  # redelivery


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgresql", marks=pytest.mark.services)])
def test_batch_and_single_writes_store_the_same(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The same inputs through record_evaluations and record_evaluation store identical contents."""
    # On PostgreSQL the batch's plain inserts go through COPY, the single path's do not.
    views = []
    for name, batch in (("single", False), ("batch", True)):
        with backend_url(kind, request, tmp_path, name) as url, open_store(url) as store:
            items = _scenario(store)
            if batch:
                written = store.record_evaluations(items)
            else:
                written = [store.record_evaluation(r, s) for r, s in items]
            views.append(_view(store, written))
    assert views[0] == views[1]


def test_batch_with_an_unknown_snapshot_writes_nothing(store: Store) -> None:
    """One item naming an unrecorded snapshot refuses the whole batch; nothing is kept."""
    known = snapshot_record("t-known")
    unknown = snapshot_record("t-unknown")
    items: list[Item] = [
        (evaluation_record(known.snapshot_id), known),
        (evaluation_record(unknown.snapshot_id), None),
    ]
    with pytest.raises(PermanentStoreError) as refused:
        store.record_evaluations(items)
    assert refused.value.code == "UNKNOWN_SNAPSHOT"
    assert (store.count_snapshots(), store.count_evaluations()) == (0, 0)


def test_batch_refuses_a_mismatched_snapshot(store: Store) -> None:
    """A pair whose snapshot is not the one its evaluation names is a ValueError."""
    record = evaluation_record(snapshot_record("t-x").snapshot_id)
    with pytest.raises(ValueError, match="snapshot"):
        store.record_evaluations([(record, snapshot_record("t-y"))])
    assert store.record_evaluations([]) == []


def test_existing_evaluations_names_the_recorded_ones(store: Store) -> None:
    """Skip-if-done for a whole message: only ids with a record come back."""
    snapshot = snapshot_record("t-e")
    done = evaluation_record(snapshot.snapshot_id, version="agent@1")
    fresh = evaluation_record(snapshot.snapshot_id, version="agent@2")
    store.record_evaluation(done, snapshot)
    asked = [done.evaluation_id, fresh.evaluation_id, done.evaluation_id]
    assert store.existing_evaluations(asked) == frozenset({done.evaluation_id})
    assert store.existing_evaluations([]) == frozenset()


def test_snapshot_text_from_wire_equals_the_validated_record() -> None:
    """The worker's stored form has the validated record's id, meta and text; non-objects fail."""
    content = wire("t-fast", unit_event_id="u1", text="héllo")
    slow = SnapshotRecord(content=content)
    fast = SnapshotText.from_wire(content)
    assert (fast.snapshot_id, fast.meta, fast.canonical_text) == (
        slow.snapshot_id,
        slow.meta,
        slow.canonical_text,
    )
    assert fast.canonical_text == canonical_json(content)
    with pytest.raises(ValueError, match="object"):
        SnapshotText.from_wire([1])  # type: ignore[arg-type]


def test_plain_inserts_become_copy_and_insert_if_absent_stays() -> None:
    """PostgreSQL batch rows: a plain INSERT is a COPY; ON CONFLICT or a literal keeps INSERT."""
    plain = "INSERT INTO t (a, b)\nVALUES (:a,\n :b)"
    assert _copy_of(plain) == ("COPY t (a, b) FROM STDIN", ("a", "b"))
    assert _copy_of(plain + " ON CONFLICT DO NOTHING") is None
    assert _copy_of("INSERT INTO t (a, b) VALUES (:a, 1)") is None
    assert _copy_of(_INSERT_RESULT) is not None
    assert _copy_of(_INSERT_EVALUATION) is None
