"""Settings, the app factory's configuration, metric-set versions and item decoding (no broker)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kombu import Message

from producer import LANE_QUEUES, Lane
from tests.queue.queue_kit import example_snapshots
from worker.app import celery_config, create_app
from worker.broker import broker_transport_options
from worker.consumer import delivery_of
from worker.dead_letters import DeadLetterCode
from worker.evaluation import Limits, Thresholds
from worker.handling import RefusedError, decode_snapshot
from worker.metric_sets import UnknownMetricSetError, build_metric_set
from worker.settings import ConfigError, load_settings


def _error(**overrides: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(**overrides)
    return str(caught.value)


def test_defaults_run_the_embedded_synthetic_pipeline() -> None:
    """With nothing set: SQLite in the working dir, synthetic judge, demo thresholds, every lane."""
    settings = load_settings()
    assert settings.store_url == "sqlite:///evalq.db"
    assert settings.judge.value == "synthetic"
    assert settings.thresholds_are_demo
    assert settings.effective_thresholds == Thresholds(0.2, 0.8)
    assert settings.queues == tuple(LANE_QUEUES[lane] for lane in Lane)
    assert settings.broker_url is None


def test_environment_is_read_with_the_evalq_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """EVALQ_* variables fill the settings; comma lists and the threshold pair are parsed."""
    monkeypatch.setenv("EVALQ_LANES", "backfill, live")
    monkeypatch.setenv("EVALQ_THRESHOLDS", "0.3,0.7")
    monkeypatch.setenv("EVALQ_OUTCOME_CRITERIA", "refund_reversed,complaint")
    monkeypatch.setenv("EVALQ_CONCURRENCY", "8")
    settings = load_settings()
    assert settings.queues == ("evalq.live", "evalq.backfill")  # live first, whatever the order
    assert settings.effective_thresholds == Thresholds(0.3, 0.7)
    assert settings.outcome_criteria == ("refund_reversed", "complaint")
    assert settings.concurrency == 8
    assert load_settings(concurrency=3).concurrency == 3  # a flag beats the environment


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"judge": "systemone", "judge_api_key": "k"}, "EVALQ_THRESHOLDS"),
        ({"judge": "chat", "thresholds": "0.2,0.8"}, "EVALQ_JUDGE_URL"),
        ({"judge": "systemone", "thresholds": "0.2,0.8"}, "EVALQ_JUDGE_API_KEY"),
        ({"thresholds": "0.8,0.2"}, "EVALQ_THRESHOLDS"),
        ({"thresholds": "0.5"}, "EVALQ_THRESHOLDS"),
        ({"judge_url": "ftp://judge.example"}, "EVALQ_JUDGE_URL"),
        ({"judge_url": "http://"}, "EVALQ_JUDGE_URL"),
        ({"budget_s": 0}, "EVALQ_BUDGET_S"),
        ({"budget_s": 301}, "EVALQ_BUDGET_S"),
        ({"lanes": "live,bulk"}, "EVALQ_LANES"),
        ({"metric_set": "everything"}, "EVALQ_METRIC_SET"),
        ({"store_url": "mysql://db"}, "EVALQ_STORE_URL"),
        ({"broker_url": "http://broker"}, "EVALQ_BROKER_URL"),
        ({"visibility_timeout_s": 1}, "EVALQ_VISIBILITY_TIMEOUT_S"),
    ],
)
def test_invalid_configuration_names_the_variable(overrides: dict[str, Any], variable: str) -> None:
    """Each invalid setting fails at start with a message that starts with its variable name."""
    assert _error(**overrides).startswith(variable)


def test_errors_never_echo_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rejected configuration's message does not contain the API key."""
    secret = "sk-live-0123456789"
    message = _error(judge="systemone", judge_api_key=secret, budget_s=-1)
    assert secret not in message
    assert "EVALQ_BUDGET_S" in message


def test_typesafe_api_key_only_serves_system_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """TYPESAFE_API_KEY is System One's key; a chat judge never receives it."""
    monkeypatch.setenv("TYPESAFE_API_KEY", "ts-key")
    systemone = load_settings(judge="systemone", thresholds="0.2,0.8")
    assert systemone.api_key is not None
    assert systemone.api_key.get_secret_value() == "ts-key"
    chat = load_settings(
        judge="chat", thresholds="0.2,0.8", judge_url="http://127.0.0.1:1/v1", judge_model="m"
    )
    assert chat.api_key is None


def test_enqueue_and_worker_require_a_broker_url() -> None:
    """Without EVALQ_BROKER_URL the worker side refuses to start, naming the variable."""
    with pytest.raises(ConfigError, match=r"^EVALQ_BROKER_URL"):
        load_settings().require_broker()
    with pytest.raises(ConfigError, match=r"^EVALQ_BROKER_URL"):
        create_app(load_settings())


def test_visibility_timeout_is_sized_from_one_evaluation() -> None:
    """VT = max(60 s, 4 x (budget + margin)): sized from one evaluation, not from a batch."""
    # Held messages renew their lease, so a batch's length does not matter; a dead worker's
    # messages come back within ~1 minute.
    settings = load_settings(budget_s=3, batch_size=64, concurrency=32)
    assert settings.evaluation_s == 3 + 2
    assert settings.effective_visibility_timeout_s == 60
    assert load_settings(budget_s=30).effective_visibility_timeout_s == 4 * (30 + 2)
    options = broker_transport_options(settings, "redis://127.0.0.1:6379/0")
    assert options["visibility_timeout"] == settings.effective_visibility_timeout_s
    assert options["visibility_timeout"] + options["unacked_restore_interval"] < 120
    assert options["unacked_restore_throttle"] == 1
    assert options["max_connections"] >= 16  # acks, events and fetches share a small pool
    assert options["queue_order_strategy"] == "priority"


def test_app_configuration_is_at_least_once_json_only() -> None:
    """acks_late + reject_on_worker_lost, prefetch 1, JSON only, no result backend, lane queues."""
    settings = load_settings(broker_url="redis://127.0.0.1:6379/0")
    app = create_app(settings)
    conf = app.conf
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 2  # the next messages wait on the loop
    assert conf.accept_content == ["json"]
    assert (conf.task_serializer, conf.result_serializer) == ("json", "json")
    assert conf.task_ignore_result is True
    assert conf.result_backend is None
    assert conf.worker_send_task_events is True
    assert conf.task_send_sent_event is True
    assert conf.worker_pool == "solo"  # never given a message: the consumer evaluates
    assert conf.worker_consumer == "worker.consumer:EvalqConsumer"
    assert conf.worker_concurrency == settings.process_concurrency  # prefetch = slots
    assert {q.name for q in conf.task_queues} == set(LANE_QUEUES.values())
    assert "evalq" in {step.label for step in app.steps["consumer"]}  # the lifecycle bootstep
    assert set(app.tasks) >= {"evalq.evaluate", "evalq.outcome"}


def test_broker_knobs_are_redis_only() -> None:
    """amqp gets no Redis transport options and no reliable-fetch transport."""
    amqp = celery_config(load_settings(), "amqp://guest:guest@127.0.0.1:5672//")
    assert amqp["broker_transport_options"] == {}
    assert "broker_transport" not in amqp


@pytest.mark.parametrize(
    "name",
    [
        "EVALQ_POOL_THREADS",
        "EVALQ_EVALUATOR_PROCESSES",
        "EVALQ_POOL",
        "EVALQ_SWITCH_INTERVAL_MS",
        "EVALQ_GC_GEN0_THRESHOLD",
    ],
)
def test_a_removed_variable_fails_the_start_saying_what_replaced_it(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Settings of the threads-pool worker are refused by name, with what to use instead."""
    monkeypatch.setenv(name, "4")
    message = _error()
    assert message.startswith(f"{name}: removed;")


def test_metric_set_version_tracks_what_changes_results() -> None:
    """Same inputs → same version; thresholds, judge or limits change it; unknown names refused."""

    def version(**changes: Any) -> str:
        args: dict[str, Any] = {
            "thresholds": Thresholds(0.2, 0.8),
            "judge": "synthetic",
            "limits": Limits(budget_s=3.0),
        }
        args.update(changes)
        return build_metric_set("agent", **args).version

    base = version()
    assert base == version(limits=Limits(budget_s=9.0))  # the budget is not a different question
    assert base.startswith("agent@")
    assert base != version(thresholds=Thresholds(0.3, 0.8))
    assert base != version(judge="systemone:jev-latest")
    assert base != version(limits=Limits(max_questions=64))
    extended = build_metric_set(
        "agent+trajectory", thresholds=Thresholds(0.2, 0.8), judge="synthetic", limits=Limits()
    )
    assert extended.metric_ids[-2:] == ("tool_execution", "trajectory_match")
    assert len(extended.metric_ids) == 9
    with pytest.raises(UnknownMetricSetError):
        build_metric_set("nope", thresholds=Thresholds(0.2, 0.8), judge="x", limits=Limits())


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"schema_version": 2}, DeadLetterCode.UNSUPPORTED_SCHEMA_VERSION),
        ({"unexpected": True}, DeadLetterCode.SCHEMA_INVALID),
        ({"events": "nope"}, DeadLetterCode.SCHEMA_INVALID),
        ({"source": "x" * (4 * 1024 * 1024)}, DeadLetterCode.PAYLOAD_TOO_LARGE),
        ({"source": "lone \ud800 surrogate"}, DeadLetterCode.SCHEMA_INVALID),  # not UTF-8
    ],
)
def test_invalid_items_get_their_reason_code(change: dict[str, Any], code: str) -> None:
    """Decoding refuses bad snapshots with the dead-letter code that names the problem."""
    item = {**example_snapshots()["order-42"].wire(), **change}
    with pytest.raises(RefusedError) as caught:
        decode_snapshot(item)
    assert caught.value.code == code


def test_a_lone_surrogate_in_a_json_key_is_schema_invalid() -> None:
    """A key pydantic accepts but JSON cannot hold (found by the contract property test)."""
    item = example_snapshots()["order-42"].wire()
    call = next(e for e in item["events"] if e["type"] == "tool_call")
    call["arguments"] = {"\ud800": None}
    with pytest.raises(RefusedError) as caught:
        decode_snapshot(item)
    assert caught.value.code == DeadLetterCode.SCHEMA_INVALID


def test_a_valid_item_decodes_to_the_same_snapshot_id() -> None:
    """A snapshot's wire form decodes back to the identical content (same id)."""
    snapshot = example_snapshots()["order-42"]
    assert decode_snapshot(snapshot.wire()).snapshot_id == snapshot.snapshot_id


def _task_message(body: Any, **headers: Any) -> Message:
    """A kombu message as the consumer receives it: JSON body, protocol-2 task headers."""
    return Message(
        body=json.dumps(body),
        headers={"id": "task-1", "task": "evalq.evaluate", "lang": "py", **headers},
        content_type="application/json",
        content_encoding="utf-8",
        delivery_info={"routing_key": "evalq.backfill"},
    )


def test_a_task_message_is_read_into_a_delivery() -> None:
    """A protocol-2 body [args, kwargs, embed] gives the task's arguments and its lane."""
    delivery = delivery_of(_task_message([[{"x": 1}], {}, {"callbacks": None}]))
    assert delivery.refused is None
    assert (delivery.task, delivery.args, dict(delivery.kwargs)) == (
        "evalq.evaluate",
        ({"x": 1},),
        {},
    )
    assert delivery.lane is Lane.BACKFILL


@pytest.mark.parametrize(
    ("body", "headers", "code"),
    [
        ([[1], {}, {}, "extra"], {}, DeadLetterCode.INVALID_MESSAGE),
        ([[1], {}, {}], {"task": "celery.accumulate"}, DeadLetterCode.UNKNOWN_TASK),
        ([[1], {}, {}], {"eta": "2099-01-01T00:00:00+00:00"}, DeadLetterCode.SCHEDULED),
        ([[1], {}, {}], {"expires": "2001-01-01T00:00:00+00:00"}, DeadLetterCode.EXPIRED),
        ([[1], {}, {}], {"expires": "not a time"}, DeadLetterCode.INVALID_MESSAGE),
    ],
)
def test_a_message_the_handler_cannot_take_is_refused_with_its_code(
    body: Any, headers: dict[str, Any], code: DeadLetterCode
) -> None:
    """Bad bodies, unknown (also built-in) task names, eta and passed expires are refusals."""
    message = _task_message(body, **headers)
    delivery = delivery_of(message)
    assert delivery.refused is code
    assert delivery.raw == json.dumps(body).encode()  # the raw body, for the dead letter


def test_a_message_without_task_headers_is_unknown() -> None:
    """Not a Celery protocol-2 task message at all: UNKNOWN_MESSAGE."""
    message = Message(body="{}", headers={}, content_type="application/json")
    assert delivery_of(message).refused is DeadLetterCode.UNKNOWN_MESSAGE
