"""Outcome events: linked in both arrival orders, idempotent, and never changing earlier rows."""

from __future__ import annotations

from tests.store._store_helpers import (
    dump_tables,
    evaluation_record,
    outcome_record,
    snapshot_record,
)
from worker.store import Store


def _linked_events(store: Store, evaluation_id: str) -> list[str]:
    return [link.outcome.event_id for link in store.links_for_evaluation(evaluation_id)]


def test_outcome_after_evaluation_links_it(store: Store) -> None:
    """An outcome arriving after the evaluation links to it and is returned as linked."""
    snapshot = snapshot_record("t-after")
    evaluation = store.record_evaluation(evaluation_record(snapshot.snapshot_id), snapshot)
    written = store.record_outcome(outcome_record("o-after", "t-after"))
    assert written.created
    assert written.linked == (evaluation.id,)
    assert _linked_events(store, evaluation.id) == ["o-after"]


def test_outcome_before_evaluation_is_linked_when_it_lands(store: Store) -> None:
    """An outcome that arrives first is kept and linked when the evaluation lands."""
    early = store.record_outcome(outcome_record("o-early", "t-before"))
    assert early.created
    assert early.linked == ()
    snapshot = snapshot_record("t-before")
    evaluation = store.record_evaluation(evaluation_record(snapshot.snapshot_id), snapshot)
    links = store.links_for_evaluation(evaluation.id)
    assert [link.outcome for link in links] == [outcome_record("o-early", "t-before")]


def test_same_outcome_twice_changes_nothing(store_url: str, store: Store) -> None:
    """Re-sending an outcome event id creates nothing, links nothing and leaves rows unchanged."""
    snapshot = snapshot_record("t-twice")
    evaluation = store.record_evaluation(evaluation_record(snapshot.snapshot_id), snapshot)
    assert store.record_outcome(outcome_record("o-twice", "t-twice")).created
    before = dump_tables(store_url)
    again = store.record_outcome(outcome_record("o-twice", "t-twice", name="something_else"))
    assert (again.created, again.linked) == (False, ())
    assert dump_tables(store_url) == before
    assert _linked_events(store, evaluation.id) == ["o-twice"]


def test_outcome_links_every_evaluation_of_its_trace_only(store: Store) -> None:
    """Without a unit, an outcome links all evaluations of its trace and none of other traces."""
    mine = snapshot_record("t-mine")
    other = snapshot_record("t-other")
    v1 = store.record_evaluation(evaluation_record(mine.snapshot_id), mine).id
    v2 = store.record_evaluation(evaluation_record(mine.snapshot_id, version="agent@2")).id
    foreign = store.record_evaluation(evaluation_record(other.snapshot_id), other).id
    written = store.record_outcome(outcome_record("o-trace", "t-mine"))
    assert written.linked == (v1, v2)
    assert _linked_events(store, foreign) == []


def test_outcome_naming_a_unit_links_only_that_unit(store: Store) -> None:
    """An outcome with a unit event id links that unit's evaluations, in both arrival orders."""
    unit_a = snapshot_record("t-units", unit_event_id="u-a")
    unit_b = snapshot_record("t-units", unit_event_id="u-b")
    a = store.record_evaluation(evaluation_record(unit_a.snapshot_id), unit_a).id
    assert store.record_outcome(outcome_record("o-a", "t-units", unit_event_id="u-a")).linked == (
        a,
    )
    store.record_outcome(outcome_record("o-b", "t-units", unit_event_id="u-b"))
    b = store.record_evaluation(evaluation_record(unit_b.snapshot_id), unit_b).id
    assert _linked_events(store, a) == ["o-a"]
    assert _linked_events(store, b) == ["o-b"]


def test_pending_outcomes_are_derived_from_links(store: Store) -> None:
    """A criterion stays pending until an outcome of that name is linked; rows never change."""
    snapshot = snapshot_record("t-pending")
    record = evaluation_record(snapshot.snapshot_id, criteria=("refund_reversed", "complaint"))
    evaluation = store.record_evaluation(record, snapshot)
    assert store.pending_outcomes(evaluation.id) == ("complaint", "refund_reversed")
    store.record_outcome(outcome_record("o-unrelated", "t-pending", name="page_view"))
    assert store.pending_outcomes(evaluation.id) == ("complaint", "refund_reversed")
    store.record_outcome(outcome_record("o-refund", "t-pending", name="refund_reversed"))
    assert store.pending_outcomes(evaluation.id) == ("complaint",)
    stored = store.get_evaluation(evaluation.id)
    assert stored is not None
    assert stored.record.outcome_criteria == ("complaint", "refund_reversed")


def test_earlier_rows_are_byte_for_byte_unchanged(store_url: str, store: Store) -> None:
    """Outcomes, re-evaluations, re-runs and duplicates only add rows; earlier rows are intact."""
    snapshot = snapshot_record("t-bytes")
    v1 = evaluation_record(snapshot.snapshot_id, criteria=("refund_reversed",))
    store.record_evaluation(v1, snapshot)
    store.record_outcome(outcome_record("o-1", "t-bytes"))
    before = dump_tables(store_url)

    store.record_outcome(outcome_record("o-2", "t-bytes"))
    store.record_outcome(outcome_record("o-1", "t-bytes"))
    store.record_evaluation(evaluation_record(snapshot.snapshot_id, version="agent@2"))
    store.record_evaluation(evaluation_record(snapshot.snapshot_id, run="rerun"))
    store.record_evaluation(v1, snapshot)
    store.put_snapshot(snapshot)
    after = dump_tables(store_url)

    for table, rows in before.items():
        missing = [row for row in rows if row not in after[table]]
        assert missing == [], f"{table}: earlier rows changed or vanished"
    grown = {t: len(after[t]) - len(before[t]) for t in before}
    assert grown["evaluations"] == 2
    assert grown["metric_results"] == 2 * len(v1.results)
    assert grown["outcomes"] == 1
    assert grown["outcome_links"] == 1 + 2 * 2  # o-2→v1, then o-1 and o-2 → each new evaluation
    assert grown["snapshots"] == grown["snapshot_contents"] == grown["pending_outcomes"] == 0


def test_an_event_id_stored_with_other_content_is_a_conflict(store_url: str, store: Store) -> None:
    """Same event id, other value or name: ``conflict``, rows unchanged; identical: no conflict."""
    first = outcome_record("o-conflict", "t-conflict")
    store.record_outcome(first)
    before = dump_tables(store_url)
    other_value = first.model_copy(update={"value": {"amount": 99}})
    other_name = outcome_record("o-conflict", "t-conflict", name="chargeback")
    assert store.record_outcome(other_value) == (False, (), True)
    assert store.record_outcome(other_name).conflict
    assert store.record_outcome(first) == (False, (), False)
    assert dump_tables(store_url) == before
