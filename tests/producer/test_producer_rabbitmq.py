"""`Producer` on a real RabbitMQ: sends are confirmed; a deleted lane queue is declared again."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import pytest
from celery import Celery
from kombu import Connection, Queue

from producer import BrokerError, BrokerFailure, Lane, Producer, Snapshot, run_backfill
from producer._backfill import BackfillRetry
from producer._broker import Broker
from producer._confirms import Confirms, Settled
from producer._publishing import Message, Publisher, TaskIds
from producer._submitter import RetryPolicy
from producer.topology import LANE_QUEUES
from tests.producer.blackhole_proxy import BlackholeProxy
from tests.producer.producer_kit import make_snapshot, write_lines
from tests.queue.queue_kit import purge_lane_queues

pytestmark = pytest.mark.services

_Send = Callable[[Producer, Snapshot], None]


def _enqueue(producer: Producer, snapshot: Snapshot) -> None:
    producer.enqueue(snapshot, lane=Lane.LIVE)


def _send_many(producer: Producer, snapshot: Snapshot) -> None:
    producer.send_many([snapshot, make_snapshot(f"{snapshot.trace_id}-b")], lane=Lane.LIVE)


def _submit(producer: Producer, snapshot: Snapshot) -> None:
    assert producer.submit(snapshot)
    assert producer.flush(timeout_s=10)
    stats = producer.live_stats()
    assert stats is not None
    assert stats.dropped_failed == 0


@pytest.fixture
def rabbitmq(amqp_url: str) -> Iterator[str]:
    """The shared RabbitMQ with empty lane queues (emptied again after the test)."""
    purge_lane_queues(amqp_url)
    yield amqp_url
    purge_lane_queues(amqp_url)


def _depth(url: str, queue: str) -> int:
    with Connection(url, connect_timeout=5) as conn:
        channel: Any = conn.default_channel  # py-amqp's channel (kombu types the abstract one)
        return int(channel.queue_declare(queue, passive=True).message_count)


def _delete(url: str, queue: str) -> None:
    with Connection(url, connect_timeout=5) as conn:
        channel: Any = conn.default_channel
        channel.queue_delete(queue)


@pytest.mark.parametrize("send", [_enqueue, _send_many, _submit], ids=["enqueue", "bulk", "live"])
def test_a_send_after_its_lane_queue_was_deleted_declares_it_again(
    rabbitmq: str, send: _Send
) -> None:
    """A lane queue deleted mid-run is declared again by the next send, and the send lands in it."""
    # kombu remembers the first declaration; that memory must not leave the send unroutable.
    live = LANE_QUEUES[Lane.LIVE]
    with Producer(rabbitmq) as producer:
        send(producer, make_snapshot("before"))
        _delete(rabbitmq, live)
        send(producer, make_snapshot("after"))
        expected = 2 if send is _send_many else 1
        assert _depth(rabbitmq, live) == expected


def test_a_live_publish_the_broker_refuses_is_counted_dropped_not_sent(
    rabbitmq: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A live publish RabbitMQ nacks is dropped_failed, not sent, logged with the broker's code."""
    # Refused: the live queue is replaced, after the producer declared it, by a full one that
    # rejects publishes.
    live = LANE_QUEUES[Lane.LIVE]
    full = Queue(live, queue_arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    once = RetryPolicy(attempts=1, timeout_s=5.0)
    with Producer(rabbitmq, live_retry=once) as producer:
        _submit(producer, make_snapshot("accepted"))
        _delete(rabbitmq, live)
        with Connection(rabbitmq, connect_timeout=5) as conn:
            full(conn.default_channel).declare()
        try:
            assert producer.submit(make_snapshot("refused"))
            assert producer.flush(timeout_s=10)
            stats = producer.live_stats()
            assert stats is not None
            assert (stats.sent, stats.dropped_failed) == (1, 1)
        finally:
            _delete(rabbitmq, live)  # the fixture declares the real one again
    drops = [r.getMessage() for r in caplog.records if "evalq.submit.dropped" in r.getMessage()]
    assert len(drops) == 1
    assert "error_type=BrokerError code=PUBLISH_REFUSED" in drops[0]


def test_only_amqp_brokers_confirm(redis_url: str, amqp_broker: str) -> None:
    """Confirms and returns are RabbitMQ's (kombu's AMQP transports); Redis publishes plainly."""
    assert Broker.of(amqp_broker).confirms
    assert not Broker.of(redis_url).confirms


def test_a_bulk_send_the_broker_refuses_raises_at_the_send(rabbitmq: str) -> None:
    """A bulk send RabbitMQ nacks raises BrokerError PUBLISH_REFUSED instead of returning."""
    # Refused: the live queue is replaced, after the producer declared it, by a full one that
    # rejects publishes.
    live = LANE_QUEUES[Lane.LIVE]
    full = Queue(live, queue_arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    with Producer(rabbitmq) as producer:
        _send_many(producer, make_snapshot("accepted"))
        _delete(rabbitmq, live)
        with Connection(rabbitmq, connect_timeout=5) as conn:
            full(conn.default_channel).declare()
        try:
            with pytest.raises(BrokerError) as raised:
                _send_many(producer, make_snapshot("refused"))
            assert raised.value.code is BrokerFailure.PUBLISH_REFUSED
        finally:
            _delete(rabbitmq, live)


def _queued_trace_ids(url: str, queue: str) -> set[str]:
    """Every snapshot's trace id in ``queue`` (each message taken: the queue ends empty)."""
    seen: set[str] = set()
    with Connection(url, connect_timeout=5) as conn:
        channel: Any = conn.default_channel
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            args, _, _ = json.loads(message.body)
            items = args[0] if isinstance(args[0], list) else [args[0]]
            seen.update(item["trace_id"] for item in items)
    return seen


def _through(proxy: BlackholeProxy, url: str) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    broker = urlsplit(url)
    netloc = f"{broker.username}:{broker.password}@127.0.0.1:{proxy.port}"
    return broker._replace(netloc=netloc).geturl()


def _failing(url: str) -> BlackholeProxy:
    """A proxy to ``url``'s broker that swallows its first connection's writes past 150 kB
    for 1 s, then drops it (a broker or network path failing mid-stream)."""
    broker = urlsplit(url)
    target = (broker.hostname or "127.0.0.1", broker.port or 5672)
    return BlackholeProxy(target, swallow_after=150_000, hold_s=1.0)


def test_a_backfill_through_a_failing_connection_loses_no_snapshot(
    rabbitmq: str, tmp_path: Path
) -> None:
    """A backfill whose connection swallows writes, then drops, still queues every snapshot."""
    # Writes swallowed for 1 s, then a drop: the unconfirmed batch fails and is sent again.
    # Without confirms, the swallowed ones were counted as sent and lost.
    source = tmp_path / "traces.jsonl"
    write_lines(source, 1_200)
    retry = BackfillRetry(attempts=6, timeout_s=60.0, wait_initial_s=0.1, wait_max_s=0.5)
    with _failing(rabbitmq) as proxy, Producer(_through(proxy, rabbitmq)) as producer:

        def send(batch: Sequence[Snapshot]) -> None:
            producer.send_many(batch, lane=Lane.BACKFILL, batch_size=8)

        summary = run_backfill([source], send, batch_size=100, retry=retry)
    assert proxy.swallowed > 0
    assert summary.progress.enqueued == 1_200
    queued = _queued_trace_ids(rabbitmq, LANE_QUEUES[Lane.BACKFILL])
    assert queued == {f"t{i}" for i in range(1_200)}


def test_live_submits_through_a_failing_connection_lose_no_snapshot(rabbitmq: str) -> None:
    """Live submits whose connection swallows writes, then drops: all counted sent are queued."""
    # Writes swallowed for 1 s, then a drop: the unconfirmed batch is retried, none dropped.
    snapshots = [make_snapshot(f"live{i}", text="x" * 400) for i in range(600)]
    retry = RetryPolicy(attempts=10, timeout_s=30.0, wait_initial_s=0.05, wait_max_s=0.5)
    with _failing(rabbitmq) as proxy:
        with Producer(_through(proxy, rabbitmq), live_retry=retry) as producer:
            assert all(producer.submit(s) for s in snapshots)
            assert producer.flush(timeout_s=30)
            stats = producer.live_stats()
        assert proxy.swallowed > 0
    assert stats is not None
    assert (stats.sent, stats.dropped_failed) == (600, 0)
    queued = _queued_trace_ids(rabbitmq, LANE_QUEUES[Lane.LIVE])
    assert queued == {s.trace_id for s in snapshots}


class _Message:
    def __init__(self, task_id: str) -> None:
        self.properties = {"correlation_id": task_id}


class _Channel:
    """py-amqp's channel as Confirms sees it; the connection replays scripted broker frames."""

    def __init__(self) -> None:
        self.events: defaultdict[str, set[Callable[..., None]]] = defaultdict(set)
        self.published: list[str] = []
        self.frames: list[tuple[str, tuple[object, ...]]] = []
        self.connection = self

    def confirm_select(self) -> None:
        self.selected = True

    def basic_publish(self, message: _Message, *args: object, **kwargs: object) -> None:
        self.published.append(message.properties["correlation_id"])

    def drain_events(self, timeout: float) -> None:
        if not self.frames:
            raise TimeoutError("timed out")  # py-amqp: the socket's timeout, nothing came
        event, args = self.frames.pop(0)
        for handler in self.events[event]:
            handler(*args)


def test_confirms_settle_every_publish_and_name_the_nacked_and_returned() -> None:
    """A multiple ack settles every tag up to it; the wait names the nacked and returned tasks."""
    # Confirms numbers publishes as the broker does; the wait ends when none is pending.
    channel = _Channel()
    confirms = Confirms.on(channel)
    assert Confirms.on(channel) is confirms
    for task_id in ("t1", "t2", "t3", ""):
        channel.basic_publish(_Message(task_id), exchange="", routing_key="q")
    channel.frames = [
        ("basic_return", (None, "", "q", _Message("t2"))),
        ("basic_ack", (2, True)),
        ("basic_nack", (3, False)),
        ("basic_ack", (4, False)),
    ]
    settled = confirms.wait(timeout_s=5)
    assert channel.published == ["t1", "t2", "t3", ""]
    assert settled == Settled(frozenset({"t3"}), frozenset({"t2"}))
    assert channel.frames == []
    assert confirms.wait(timeout_s=5) == Settled(frozenset(), frozenset())


_AMQP = Broker.of("amqp://guest:guest@127.0.0.1:5672//")  # its traits only: nothing connects


def test_confirms_that_do_not_come_are_a_confirm_timeout() -> None:
    """Confirms that never come are CONFIRM_TIMEOUT naming the pending count, not a TimeoutError."""
    channel = _Channel()
    confirms = Confirms.on(channel)
    channel.basic_publish(_Message("t1"), exchange="", routing_key="q")
    with pytest.raises(BrokerError, match="1 publishes") as raised:
        confirms.wait(timeout_s=0.5)
    assert raised.value.code is BrokerFailure.CONFIRM_TIMEOUT


class _App:
    """A Celery app as Publisher uses it: send_task publishes on the producer's channel; the
    queues it declares are counted by name."""

    def __init__(self, producer: _Producer) -> None:
        self.producer = producer
        self.declared: list[str] = []
        self.amqp = self  # app.amqp.queues[name].bind(channel).declare()
        self.queues = _Queues(self.declared)

    def send_task(self, name: str, *, task_id: str, **options: object) -> None:
        self.producer.channel.basic_publish(_Message(task_id))


class _Producer:
    def __init__(self) -> None:
        self.channel = _Channel()


class _Queues:
    def __init__(self, declared: list[str]) -> None:
        self._declared = declared
        self._name = ""

    def __getitem__(self, name: str) -> _Queues:
        self._name = name
        return self

    def bind(self, channel: object) -> _Queues:
        return self

    def declare(self) -> None:
        self._declared.append(self._name)


def test_messages_returned_together_declare_their_queue_once() -> None:
    """Returned messages declare their queue once, go again together and settle in one wait."""
    # Returned unroutable because their lane queue was deleted.
    producer = _Producer()
    app = _App(producer)
    publisher = Publisher(cast(Celery, app), producer, TaskIds(), broker=_AMQP, declare_once=False)
    for label in ("a", "b", "c"):
        publisher.send(Message("evalq.evaluate", {}, "evalq.live", label))
    sent = list(producer.channel.published)
    returns = [("basic_return", (None, "", "evalq.live", _Message(t))) for t in sent]
    producer.channel.frames = [*returns, ("basic_ack", (3, True)), ("basic_ack", (6, True))]
    publisher.settle()
    assert app.declared == ["evalq.live"]
    assert producer.channel.published == sent + sent
    assert producer.channel.frames == []


def test_a_window_whose_channel_was_replaced_is_sent_again_on_the_new_one() -> None:
    """A window whose channel was replaced is sent again whole on the new one and settled there."""
    # kombu reconnecting inside a publish moves the producer to a new channel, where the old
    # channel's confirms never come.
    producer = _Producer()
    old = producer.channel
    publisher = Publisher(
        cast(Celery, _App(producer)), producer, TaskIds(), broker=_AMQP, declare_once=False
    )
    publisher.send(Message("evalq.evaluate", {}, "evalq.live", "first"))
    producer.channel = new = _Channel()
    publisher.send(Message("evalq.evaluate", {}, "evalq.live", "second"))
    new.frames = [("basic_ack", (3, True))]  # the second message and both again
    publisher.settle()
    first, second = old.published[0], new.published[0]
    assert new.published == [second, first, second]
    assert new.frames == []
