"""``evalq redrive`` on dead letters it cannot (or must not) send: skipped, reported, converging."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.hostile.hostile_kit import evalq, record
from tests.producer.producer_kit import make_snapshot, queued_payloads
from worker.canonical_json import canonical_json
from worker.store import DeadLetterRecord, Store

pytestmark = pytest.mark.services


def _dead(store: Store, reason: str, payload: bytes, lane: str = "live") -> str:
    record_ = DeadLetterRecord(reason=reason, task="evalq.evaluate", lane=lane, payload=payload)
    return store.record_dead_letter(record_)


def _sent_trace_ids(redis_url: str) -> list[str]:
    found: list[str] = []
    for args in queued_payloads(redis_url, "evalq.live"):
        items = args[0] if isinstance(args[0], list) else [args[0]]
        found.extend(item["trace_id"] for item in items)
    return sorted(found)


def _wire(trace_id: str, **changes: Any) -> dict[str, Any]:
    return {**make_snapshot(trace_id).wire(), **changes}


def test_redrive_skips_undecodable_and_truncated_payloads_and_goes_on(
    env: dict[str, str], store: Store, redis_url: str
) -> None:
    """'<class dict>' text and a truncated payload are skipped with a code; the valid one goes."""
    undecodable = _dead(store, "SCHEMA_INVALID", b"<class 'dict'>")
    big = _wire("big", claims=["x" * (70 * 1024)])
    truncated = _dead(store, "INTERNAL_ERROR", canonical_json(big).encode())
    _dead(store, "INTERNAL_ERROR", canonical_json(_wire("ok")).encode())
    done = evalq(env, "redrive")
    assert done.returncode == 0, done.stderr
    assert "examined: 3; re-enqueued: 1; still invalid: 2" in done.stdout
    assert f"{undecodable} (SCHEMA_INVALID): UNDECODABLE" in done.stderr
    assert f"{truncated} (INTERNAL_ERROR): TRUNCATED" in done.stderr
    assert "Traceback" not in done.stderr
    assert _sent_trace_ids(redis_url) == ["ok"]
    record(
        "redrive: '<class dict>' + truncated + valid", "2 skipped (UNDECODABLE, TRUNCATED), 1 sent"
    )


def test_redrive_never_resends_an_unknown_metric_set_and_converges(
    env: dict[str, str], store: Store, redis_url: str
) -> None:
    """A snapshot asking for an unknown metric set is 'still invalid', never sent, run after run."""
    dead = _dead(
        store, "UNKNOWN_METRIC_SET", canonical_json(_wire("m", metric_set="nope")).encode()
    )
    for _ in range(2):
        done = evalq(env, "redrive")
        assert done.returncode == 0, done.stderr
        assert "examined: 1; re-enqueued: 0; still invalid: 1" in done.stdout
        assert f"{dead} (UNKNOWN_METRIC_SET): UNKNOWN_METRIC_SET" in done.stderr
    assert _sent_trace_ids(redis_url) == []
    assert len(store.open_dead_letters()) == 1
    record("redrive: UNKNOWN_METRIC_SET (twice)", "still invalid, nothing sent, same 1 dead letter")


def test_redrive_of_a_too_deep_snapshot_reports_it_and_goes_on(
    env: dict[str, str], store: Store, redis_url: str
) -> None:
    """A dead letter holding a 300-deep value is JSON_TOO_DEEP, not a crash; the next one goes."""
    deep = json.loads("[" * 300 + "]" * 300)
    wire = _wire("deep")
    wire["events"] = [*wire["events"][:-1], {**wire["events"][-1], "arguments": deep}]
    wire["contexts"] = [deep]
    dead = _dead(store, "INTERNAL_ERROR", canonical_json(wire).encode())
    _dead(store, "INTERNAL_ERROR", canonical_json(_wire("after")).encode())
    done = evalq(env, "redrive")
    assert done.returncode == 0, done.stderr
    assert "examined: 2; re-enqueued: 1; still invalid: 1" in done.stdout
    assert f"{dead} (INTERNAL_ERROR): JSON_TOO_DEEP" in done.stderr
    assert "Traceback" not in done.stderr
    assert _sent_trace_ids(redis_url) == ["after"]
    record("redrive: 300-deep snapshot, then a valid one", "JSON_TOO_DEEP reported, next one sent")
