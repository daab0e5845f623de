"""`Producer` live path against a real Redis: sampling, tallies, never raising, fast failure."""

from __future__ import annotations

import time

import pytest

from producer import Producer, Sampler, SamplingTally, Snapshot
from producer._producer import live_transport_options
from producer._submitter import RetryPolicy
from tests.producer.producer_kit import make_snapshot, queue_length, queued_payloads
from worker.broker import broker_transport_options
from worker.embedded import RedisServer
from worker.settings import load_settings

pytestmark = pytest.mark.services


def test_everything_sampled_out_still_reports_the_tally(redis_url: str) -> None:
    """At rate 0 nothing is queued for evaluation, yet close() sends the counts of what was seen."""
    producer = Producer(redis_url, sampler=Sampler(default_rate=0.0))
    results = [producer.submit(make_snapshot(f"t{i}")) for i in range(40)]
    producer.close(timeout_s=10)
    assert results == [False] * 40
    assert queue_length(redis_url, "evalq.live") == 0
    (args,) = queued_payloads(redis_url, "evalq.outcomes")
    tally = SamplingTally.model_validate(args[0])
    assert [(r.rule, r.seen, r.sampled, r.sampled_out) for r in tally.rows] == [
        ("default", 40, 0, 40)
    ]


def test_sampled_snapshots_are_stamped_and_sent_on_their_lane(redis_url: str) -> None:
    """Kept snapshots carry the sampler's rate, weight and rule; the live queue holds just them."""
    with Producer(redis_url, sampler=Sampler(default_rate=0.5)) as producer:
        kept = [s for s in (make_snapshot(f"k{i}") for i in range(60)) if producer.submit(s)]
        assert producer.flush(timeout_s=10)
    queued = [Snapshot.model_validate(args[0]) for args in queued_payloads(redis_url, "evalq.live")]
    assert {s.trace_id for s in queued} == {s.trace_id for s in kept}
    assert {(s.sampling.rate, s.sampling.weight, s.sampling.rule) for s in queued} == {
        (0.5, 2.0, "default")
    }


class _BrokenSampler(Sampler):
    def sample(self, *args: object, **kwargs: object) -> Snapshot | None:
        raise RuntimeError("sampler bug")


def test_submit_never_raises_into_the_caller(redis_url: str) -> None:
    """A failing sampler makes submit() return False; the caller sees no exception."""
    with Producer(redis_url, sampler=_BrokenSampler()) as producer:
        assert producer.live_stats() is None
        assert producer.submit(make_snapshot("t")) is False
        assert producer.flush(timeout_s=5)


def test_live_publishing_fails_fast_when_the_broker_is_gone(private_redis: RedisServer) -> None:
    """A live publish to a dead broker fails at once (Celery's default publish retries: ~0.6 s)."""
    url = private_redis.url
    options = broker_transport_options(load_settings(broker_url=url), url)
    assert live_transport_options(options)["socket_timeout"] <= 5
    policy = RetryPolicy(attempts=1, timeout_s=1.0)
    with Producer(url, transport_options=options, live_retry=policy) as producer:
        private_redis.stop()
        started = time.monotonic()
        with pytest.raises(Exception):  # noqa: B017, PT011 - kombu's error type varies by transport
            producer.send_tally(Sampler().drain_tally())
        assert time.monotonic() - started < 0.3
        producer.submit(make_snapshot("lost"))
        assert producer.flush(timeout_s=10)
        stats = producer.live_stats()
    assert stats is not None
    assert (stats.sent, stats.dropped_failed) == (0, 1)
