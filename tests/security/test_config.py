"""Configuration security: credentials from the environment and never printed, JSON only on the
wire, judge URLs http(s) with a host.

Covered elsewhere and not repeated here: Flower refuses requests without credentials and refuses
to start without basic auth (``tests/deploy/test_ops_flower.py``); the worker app accepts JSON only
and dead-letters pickle (``tests/queue/test_queue_config.py::test_app_configuration_is_at_least_
once_json_only``, ``tests/queue/test_queue_pipeline.py`` and ``tests/properties/test_messages.py``
for YAML and the raw pickle serializer); a rejected configuration never echoes a key
(``tests/queue/test_queue_config.py::test_errors_never_echo_a_key``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from producer import LANE_QUEUES, Lane, Producer
from tests.faults.conftest import StartWorker
from tests.queue.queue_kit import example_snapshots, wait_until, worker_env
from tests.security.security_kit import cli_output
from worker.embedded import RedisServer
from worker.judges import ChatJudge, SystemOneJudge
from worker.settings import ConfigError, load_settings
from worker.store import open_store

REFUSED_EVERYWHERE = [
    "ftp://judge.example",
    "file:///etc/passwd",
    "javascript:alert(1)",
    "http://",
    "http:///v1",
    "//judge.example",
    "judge.example",
]
REFUSED_BY_JUDGES_ONLY = [
    " http://judge.example",
    "http://judge.example\n",
    "https://judge example.com",
    "http://user:secret@judge.example",
    "http://judge.example/?key=secret",
    "http://judge.example/#fragment",
    "http://judge.example:99999",
]


def _settings_refusal(url: str) -> str | None:
    """None if the settings accept ``url`` as the judge URL, else their message."""
    try:
        load_settings(judge="chat", judge_url=url, judge_model="m", thresholds="0.2,0.8")
    except ConfigError as exc:
        return str(exc)
    return None


def _settings_accept(url: str) -> bool:
    message = _settings_refusal(url)
    if message is None:
        return True
    assert message.startswith("EVALQ_JUDGE_URL:"), message  # names the variable
    return False


def _judges_accept(url: str) -> bool:
    verdicts = set()
    for build in (
        lambda: SystemOneJudge(base_url=url, api_key="k"),
        lambda: ChatJudge.openai_compatible(url, "m"),
    ):
        try:
            build()
        except ValueError:
            verdicts.add(False)
        else:
            verdicts.add(True)
    assert len(verdicts) == 1, f"the two judges disagree about {url!r}"
    return verdicts.pop()


@pytest.mark.parametrize("url", REFUSED_EVERYWHERE)
def test_judge_urls_without_an_http_scheme_and_host_are_refused(url: str) -> None:
    """Other schemes, no host, whitespace: refused by the settings and by both judges."""
    assert not _settings_accept(url)
    assert not _judges_accept(url)


@pytest.mark.parametrize("url", REFUSED_BY_JUDGES_ONLY)
def test_a_judge_url_the_judges_refuse_fails_at_start(url: str) -> None:
    """Configuration a judge cannot use is refused at start, naming EVALQ_JUDGE_URL."""
    assert not _judges_accept(url)
    assert not _settings_accept(url)


_url_parts = st.tuples(
    st.sampled_from(["http", "https", "HTTP", "ftp", "file", "", "javascript", "h ttp"]),
    st.sampled_from(["://", ":/", ":", "//", ""]),
    st.text(max_size=12),
    st.sampled_from(["", ":80", ":0", ":99999", ":x"]),
    st.text(max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(_url_parts)
def test_whatever_a_judge_accepts_is_http_with_a_host(parts: tuple[str, ...]) -> None:
    """Any URL-ish string a judge (or the settings) accepts is http(s), has a host, no spaces."""
    url = "".join(parts)
    if _judges_accept(url) or _settings_accept(url):
        split = urlsplit(url)
        assert split.scheme.lower() in ("http", "https"), url
        assert split.hostname, url
    if _judges_accept(url):
        assert not any(ch.isspace() for ch in url), url


@pytest.fixture
def locked_redis(workdir: Path) -> Iterator[tuple[RedisServer, str]]:
    """A Redis of this test that requires a password (a canary), and that password."""
    password = f"redis-canary-{uuid.uuid4().hex}"
    server = RedisServer(workdir / "locked-redis")
    server.start()
    client = redis.Redis(host="127.0.0.1", port=server.port)
    client.config_set("requirepass", password)
    client.close()
    try:
        yield server, password
    finally:
        server.stop()


@pytest.fixture
def pg_with_password(postgres_url: str) -> Iterator[tuple[str, str]]:
    """A database of this test, and a URL to it carrying a password canary."""
    name = f"evalq_sec_{uuid.uuid4().hex[:10]}"
    password = f"pg-canary-{uuid.uuid4().hex}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(postgres_url)
    user = parts.username or "postgres"
    url = f"postgresql://{user}:{password}@{parts.hostname}:{parts.port or 5432}/{name}"
    try:
        yield url, password
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_defaults_carry_no_credentials() -> None:
    """Nothing configured: no broker, a local SQLite file, no key; keys never in a repr."""
    plain = load_settings()
    assert plain.broker_url is None
    assert plain.store_url == "sqlite:///evalq.db"
    assert plain.api_key is None
    key = f"sk-{uuid.uuid4().hex}"
    keyed = load_settings(judge="systemone", judge_api_key=key, thresholds="0.2,0.8")
    assert keyed.api_key is not None
    assert keyed.api_key.get_secret_value() == key
    assert key not in repr(keyed) + str(keyed) + keyed.model_dump_json()


@pytest.mark.services
def test_broker_and_store_credentials_come_from_the_environment_and_are_never_printed(
    locked_redis: tuple[RedisServer, str],
    pg_with_password: tuple[str, str],
    workdir: Path,
    start_worker: StartWorker,
    producer_for: Callable[..., Producer],
) -> None:
    """Redis and PostgreSQL passwords only in EVALQ_*: worker evaluates; no output shows them."""
    server, redis_password = locked_redis
    store_url, pg_password = pg_with_password
    broker_url = f"redis://:{redis_password}@127.0.0.1:{server.port}/0"
    worker = start_worker(broker_url=broker_url, store_url=store_url)
    producer = producer_for(broker_url)
    producer.enqueue(example_snapshots()["order-42"], lane=Lane.LIVE)
    with open_store(store_url) as store:
        wait_until(lambda: store.count_evaluations() == 1, 30, "the evaluation")
        assert pg_password not in store.location

    env = worker_env(broker_url=broker_url, store_url=store_url)
    outputs = [worker.log]
    for args in (["status", "--json"], ["report", "--json"]):
        outputs.append(cli_output(args, env, workdir))
    for text in outputs:
        assert redis_password not in text
        assert pg_password not in text


@pytest.mark.services
def test_producers_publish_json_only(redis_url: str, producer_for: Callable[..., Producer]) -> None:
    """What a producer puts on the queue is a JSON message (never pickle), by name."""
    producer = producer_for(redis_url)
    producer.enqueue(example_snapshots()["order-42"], lane=Lane.LIVE)
    client = redis.Redis.from_url(redis_url)
    raw = client.lindex(LANE_QUEUES[Lane.LIVE], 0)
    client.close()
    assert raw is not None
    message = json.loads(raw)
    assert message["content-type"] == "application/json"
    assert message["headers"]["task"] == "evalq.evaluate"
