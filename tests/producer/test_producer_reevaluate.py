"""``Producer.reevaluate_many``: retry attempts on the backfill lane, batched like backfills."""

from __future__ import annotations

import pytest

from producer import Producer, Reevaluation
from producer.snapshot import LANE_QUEUES, MAX_ATTEMPTS, Lane
from tests.producer.producer_kit import queue_length, queued_payloads
from tests.queue.queue_kit import example_snapshots, variants


def _retries(count: int) -> list[Reevaluation]:
    snapshots = variants(example_snapshots()["order-42"], count, "re")
    return [Reevaluation(snapshot=s, metric_set_version="agent@1", attempt=2) for s in snapshots]


def test_retries_go_to_the_backfill_lane_in_batches(redis_url: str) -> None:
    """Ten retries, batch size 4: three messages of 4, 4 and 2 items on evalq.backfill."""
    with Producer(redis_url) as producer:
        sent = producer.reevaluate_many(_retries(10), batch_size=4)
    assert sent == 10
    backfill = LANE_QUEUES[Lane.BACKFILL]
    assert queue_length(redis_url, LANE_QUEUES[Lane.LIVE]) == 0
    payloads = queued_payloads(redis_url, backfill)
    sizes = sorted(len(args[0]) for args in payloads)
    assert sizes == [2, 4, 4]
    items = [item for args in payloads for item in args[0]]
    assert {item["attempt"] for item in items} == {2}
    assert all(Reevaluation.model_validate(item).metric_set_version == "agent@1" for item in items)


def test_one_retry_per_message_is_the_item_itself(redis_url: str) -> None:
    """batch_size 1 sends the Reevaluation dict itself (not a list), as evalq.evaluate does."""
    (retry,) = _retries(1)
    with Producer(redis_url) as producer:
        producer.reevaluate_many([retry])
    ((item,),) = queued_payloads(redis_url, LANE_QUEUES[Lane.BACKFILL])
    assert item == retry.wire()


def test_an_attempt_past_the_contract_bound_is_refused() -> None:
    """attempt must be 2..MAX_ATTEMPTS: 1 is not a retry, MAX_ATTEMPTS + 1 is past the bound."""
    snapshot = example_snapshots()["order-42"]
    for attempt in (1, MAX_ATTEMPTS + 1):
        with pytest.raises(ValueError, match="attempt"):
            Reevaluation(snapshot=snapshot, metric_set_version="agent@1", attempt=attempt)
