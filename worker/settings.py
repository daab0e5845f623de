"""One configuration object per process: :class:`Settings`, from ``EVALQ_*`` variables and a file.

Sources, the later winning: defaults, the evaluation file's ``[evaluation]`` table
(``EVALQ_CONFIG=path`` or ``--config``; :mod:`worker.config_file`), ``EVALQ_*`` variables, CLI
flags. :attr:`Settings.evaluation` is the validated, frozen :class:`EvaluationConfig` the worker
and the observer share (``observe(..., mode=config.mode)``). Invalid configuration fails at start
with :class:`ConfigError`, which names every problem (``EVALQ_THRESHOLDS: ...``), never echoing a
value (it could be a key). An ``EVALQ_*`` variable this version does not know fails too, naming
the closest known one (a typo must not start a worker that does something else than asked).

Sizing that the broker depends on lives here too, so producers, workers and ``evalq run`` compute
the same numbers from the same inputs (``longest_task_s`` → ``visibility_timeout_s``).
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from producer.snapshot import MAX_ATTEMPTS
from producer.topology import LANE_QUEUES, Lane
from worker.config_file import RETRY_PREFIX, file_location, read_config_file
from worker.cores import available_cores
from worker.evaluation import Limits, Reason, Thresholds, check_id
from worker.judges import check_base_url
from worker.metric_sets import metric_names

__all__ = [
    "BACKSTOP_MARGIN_S",
    "COMMAND_VARIABLES",
    "DEMO_THRESHOLDS",
    "ENV_PREFIX",
    "INTERNAL_VARIABLES",
    "MAX_BUDGET_S",
    "PREFETCH_MULTIPLIER",
    "REMOVED",
    "RETRY_DEFAULT_REASONS",
    "RETRY_FIELDS",
    "TEST_PREFIX",
    "ConfigError",
    "EvaluationConfig",
    "JudgeKind",
    "RetryConfig",
    "Settings",
    "engine_reasons",
    "file_fields",
    "is_known_variable",
    "known_variables",
    "load_settings",
]

ENV_PREFIX = "EVALQ_"
DEMO_THRESHOLDS = (0.2, 0.8)
"""Uncalibrated demo pair; only ever used with the synthetic judge, and labelled ``demo``."""
PREFETCH_MULTIPLIER = 2
"""Unacked messages a consumer process holds per evaluation slot (Celery prefetch multiplier)."""
BACKSTOP_MARGIN_S = 2.0
"""Slack above the engine budget before the task's own backstop fires (planning, store, loop)."""
METRIC_SET_NAMES = ("agent", "agent+trajectory", "tool_call")
_BROKER_SCHEMES = ("redis", "rediss", "amqp", "amqps", "pyamqp", "sentinel")
_STORE_SCHEMES = ("sqlite", "postgresql", "postgres")


MAX_BUDGET_S = 30.0
"""Longest budget a snapshot may have: a live verdict later than this is no longer live."""
MODES = ("off", "shadow")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class ConfigError(ValueError):
    """Invalid configuration: every problem, each starting with the variable or key it names."""

    def __init__(self, *problems: str) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class JudgeKind(StrEnum):
    """Which judge the worker builds."""

    SYNTHETIC = "synthetic"
    SYSTEMONE = "systemone"
    CHAT = "chat"


REMOVED = {
    "EVALQ_POOL": "evaluations are coroutines on each process's event loop; there is no pool",
    "EVALQ_POOL_THREADS": "evaluations no longer take a thread each; set EVALQ_CONCURRENCY",
    "EVALQ_EVALUATOR_PROCESSES": "the worker runs one consumer process per core; set "
    "EVALQ_PROCESSES (--processes) to change that",
    "EVALQ_SWITCH_INTERVAL_MS": "a fixed, measured value now (docs/concurrency.md)",
    "EVALQ_GC_GEN0_THRESHOLD": "a fixed, measured value now (docs/concurrency.md)",
}
"""Variables earlier versions read, and what replaced them: set, they fail the start."""


def _comma_list(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _scheme(url: str) -> str:
    return urlsplit(url).scheme.lower()


def _checked_mode(value: Any) -> Any:
    """``off``/``shadow`` in any case; ``enforce`` is refused with the reason."""
    if not isinstance(value, str):
        return value
    mode = value.strip().lower()
    if mode == "enforce":
        raise ValueError(
            "enforce is refused: an evaluation after the fact cannot block an agent's action; "
            "use shadow"
        )
    if mode not in MODES:
        raise ValueError(f"expected {' or '.join(MODES)}")
    return mode


def _parse_thresholds(value: Any) -> Any:
    value = _comma_list(value)
    if value is not None and (isinstance(value, str) or len(value) != 2):
        raise ValueError("expected two numbers 'fail,pass', e.g. '0.2,0.8'")
    return value


def _check_thresholds(value: tuple[float, float] | None) -> tuple[float, float] | None:
    if value is not None:
        Thresholds(value[0], value[1])  # its own rule: 0 <= fail < pass <= 1
    return value


def _check_metrics(value: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    known = metric_names()
    for name in value:
        if name not in known:
            raise ValueError(f"unknown metric {name!r}{_suggestion(name, known)}")
    if len(set(value)) != len(value):
        twice = next(name for name in value if value.count(name) > 1)
        raise ValueError(f"duplicate metric {twice!r}")
    if not value:
        raise ValueError("at least one metric (omit the key for the agent set's metrics)")
    return value


def _check_version(value: str | None) -> str | None:
    if value is not None and _VERSION.fullmatch(value) is None:
        raise ValueError("expected 1-64 letters, digits, '.', '_' or '-' (e.g. orders-v1)")
    return value


def _suggestion(name: str, known: Any) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


RETRY_DEFAULT_REASONS = (Reason.BACKEND_ERROR, Reason.TIMEOUT)
"""What ``evalq retry`` and the automatic policy retry unless told otherwise: no answer came."""
MAX_RETRY_BACKOFF_S = 86_400.0


def engine_reasons() -> frozenset[str]:
    """The engine's reason codes (``worker.evaluation.Reason``)."""
    return frozenset(v for k, v in vars(Reason).items() if k.isupper() and isinstance(v, str))


def _check_reasons(value: tuple[str, ...]) -> tuple[str, ...]:
    known = engine_reasons()
    for code in value:
        if code not in known:
            raise ValueError(f"unknown reason code {code!r}{_suggestion(code, known)}")
    if len(set(value)) != len(value):
        raise ValueError("duplicate reason code")
    if not value:
        raise ValueError("at least one reason code (e.g. BACKEND_ERROR)")
    return value


Mode = Annotated[Literal["off", "shadow"], BeforeValidator(_checked_mode)]
RetryReasons = Annotated[
    tuple[str, ...], NoDecode, BeforeValidator(_comma_list), AfterValidator(_check_reasons)
]
RetryAttempts = Annotated[int, Field(ge=1, le=MAX_ATTEMPTS)]
RetryBackoffS = Annotated[float, Field(gt=0, le=MAX_RETRY_BACKOFF_S)]
BudgetS = Annotated[float, Field(gt=0, le=MAX_BUDGET_S)]
MaxQuestions = Annotated[int, Field(ge=1, le=512)]
MaxStateChars = Annotated[int, Field(ge=1, le=1_000_000)]
ThresholdPair = Annotated[
    tuple[float, float] | None,
    NoDecode,
    BeforeValidator(_parse_thresholds),
    AfterValidator(_check_thresholds),
]
MetricList = Annotated[
    tuple[str, ...] | None, NoDecode, BeforeValidator(_comma_list), AfterValidator(_check_metrics)
]
ConfigVersion = Annotated[str | None, AfterValidator(_check_version)]


class EvaluationConfig(BaseModel):
    """The ``[evaluation]`` table, validated and frozen: what is evaluated, and how.

    ``metrics`` None means the agent set's metrics (``trajectory_match`` is opt-in);
    ``thresholds`` None means the demo pair, allowed with the synthetic judge only.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode = "off"
    version: ConfigVersion = None
    budget_s: BudgetS = 3.0
    thresholds: ThresholdPair = None
    max_questions: MaxQuestions = 128
    max_state_chars: MaxStateChars = 100_000
    metrics: MetricList = None


class RetryConfig(BaseModel):
    """The ``[retry]`` table, validated and frozen: what a retry re-evaluates, and the policy.

    ``reasons``: a snapshot whose newest attempt has a result with one of these codes is
    retried (``evalq retry``'s default too). ``max_attempts``: the automatic policy retries
    until a snapshot has this many attempts; 1 (the default) turns it off. ``backoff_s``:
    attempt N + 1 is due ``backoff_s * 2 ** (N - 1)`` seconds after attempt N was recorded.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reasons: RetryReasons = RETRY_DEFAULT_REASONS
    max_attempts: RetryAttempts = 1
    backoff_s: RetryBackoffS = 60.0

    @property
    def automatic(self) -> bool:
        """Whether the automatic policy runs (more than one attempt allowed)."""
        return self.max_attempts > 1

    def due_after_s(self, attempt: int) -> float:
        """How long after attempt ``attempt`` was recorded the next one is due."""
        return float(self.backoff_s * 2 ** max(0, attempt - 1))


RETRY_FIELDS = tuple(RETRY_PREFIX + name for name in RetryConfig.model_fields)
"""The settings of the ``[retry]`` table (``retry_reasons``, ``retry_max_attempts``, …)."""


def file_fields() -> tuple[str, ...]:
    """Every setting the evaluation file may set: ``[evaluation]`` and ``[retry]`` keys."""
    return (*EvaluationConfig.model_fields, *RETRY_FIELDS)


class Settings(BaseSettings):
    """Everything a worker, producer or ``evalq run`` needs, from ``EVALQ_*`` variables and the
    evaluation file (build it with :func:`load_settings`, which reads the file)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, frozen=True, extra="forbid", populate_by_name=True
    )

    config: Path | None = None
    broker_url: str | None = None
    store_url: str = "sqlite:///evalq.db"
    judge: JudgeKind = JudgeKind.SYNTHETIC
    judge_url: str | None = None
    judge_model: str | None = None
    judge_api_key: SecretStr | None = None
    typesafe_api_key: SecretStr | None = Field(default=None, validation_alias="TYPESAFE_API_KEY")
    ui_token: SecretStr | None = None  # evalq ui's login token (worker.ui checks its rule)
    mode: Mode = "off"
    version: ConfigVersion = None
    budget_s: BudgetS = 3.0
    thresholds: ThresholdPair = None
    max_questions: MaxQuestions = 128
    max_state_chars: MaxStateChars = 100_000
    metrics: MetricList = None
    retry_reasons: RetryReasons = RETRY_DEFAULT_REASONS
    retry_max_attempts: RetryAttempts = 1
    retry_backoff_s: RetryBackoffS = 60.0
    metric_set: str = "agent"
    outcome_criteria: Annotated[tuple[str, ...], NoDecode] = ()
    lanes: Annotated[tuple[Lane, ...], NoDecode] = (Lane.LIVE, Lane.BACKFILL, Lane.OUTCOMES)
    concurrency: int = Field(default=256, ge=1, le=65_536)
    # one consumer process per core this process may use (affinity capped by the cgroup quota)
    processes: int = Field(default_factory=available_cores, ge=1, le=256)
    # Snapshots per backfill message. 8, not 4: the bulk publish's per-message cost (Celery's task
    # message, kombu's envelope, the Redis write) is shared by twice the snapshots (~1.6x the
    # rate), and the worker's backfill figures held (docs/concurrency.md, "Twenty-second round").
    batch_size: int = Field(default=8, ge=1, le=1000)
    # MiB of message bodies one consumer process holds at most (plus one message): Celery's
    # prefetch counts messages, and a backfill message may carry 16 MiB (worker.broker._held).
    held_mib: int = Field(default=64, ge=1, le=65_536)
    nice: int = Field(default=0, ge=0, le=19)
    visibility_timeout_s: float | None = Field(default=None, gt=0)
    restore_interval_s: float = Field(default=5.0, gt=0, le=60)
    # How long a transient store fault (disk full, database unreachable, locked) holds the
    # writes, retrying with back-off, before the worker halts (worker.halt) instead.
    store_hold_s: float = Field(default=60.0, gt=0, le=3600)
    log_level: str = "INFO"
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_addr: str = "127.0.0.1"
    # OTLP/HTTP receiver of the gen_ai.evaluation.result events (worker.otel_export; the
    # `otel` extra); unset: no events.
    otlp_endpoint: str | None = None

    @field_validator("config", mode="before")
    @classmethod
    def _no_empty_path(cls, value: Any) -> Any:
        return None if value == "" else value  # EVALQ_CONFIG= (set, empty): no file

    @field_validator("outcome_criteria", "lanes", mode="before")
    @classmethod
    def _parse_list(cls, value: Any) -> Any:
        return _comma_list(value)

    @field_validator("outcome_criteria")
    @classmethod
    def _check_criteria(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            check_id(name, "outcome criterion")
        if len(set(value)) != len(value):
            raise ValueError("duplicate criterion")
        return value

    @field_validator("lanes")
    @classmethod
    def _check_lanes(cls, value: tuple[Lane, ...]) -> tuple[Lane, ...]:
        if not value:
            raise ValueError("at least one lane (live, backfill, outcomes)")
        if len(set(value)) != len(value):
            raise ValueError("duplicate lane")
        return value

    @field_validator("metric_set")
    @classmethod
    def _check_metric_set(cls, value: str) -> str:
        if value not in METRIC_SET_NAMES:
            raise ValueError(f"unknown metric set; known: {', '.join(METRIC_SET_NAMES)}")
        return value

    @field_validator("broker_url")
    @classmethod
    def _check_broker(cls, value: str | None) -> str | None:
        if value is not None and _scheme(value) not in _BROKER_SCHEMES:
            raise ValueError(f"scheme must be one of {', '.join(_BROKER_SCHEMES)}")
        return value

    @field_validator("store_url")
    @classmethod
    def _check_store(cls, value: str) -> str:
        if _scheme(value) not in _STORE_SCHEMES:
            raise ValueError("expected sqlite:///path.db or postgresql://...")
        return value

    @field_validator("judge_url")
    @classmethod
    def _check_judge_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        # The judges' own rule, so a URL no judge can use fails at start, not per message.
        check_base_url(value)
        return value

    @field_validator("otlp_endpoint", mode="before")
    @classmethod
    def _check_otlp_endpoint(cls, value: Any) -> Any:
        if value == "":
            return None  # EVALQ_OTLP_ENDPOINT= (set, empty): no events
        if isinstance(value, str):
            parts = urlsplit(value)
            if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
                raise ValueError("expected an http(s) URL with a host, e.g. http://collector:4318")
        return value

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        level = value.upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError("expected DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return level

    @model_validator(mode="after")
    def _judge_needs(self) -> Settings:
        if self.judge is not JudgeKind.SYNTHETIC and self.thresholds is None:
            raise _FieldRuleError(
                "thresholds",
                "required for a non-synthetic judge (e.g. '0.2,0.8', or [evaluation] thresholds)",
            )
        if self.judge is JudgeKind.SYSTEMONE and self.api_key is None:
            raise _FieldRuleError(
                "judge_api_key", "required for EVALQ_JUDGE=systemone (or TYPESAFE_API_KEY)"
            )
        if self.judge is JudgeKind.CHAT and (self.judge_url is None or self.judge_model is None):
            field = "judge_url" if self.judge_url is None else "judge_model"
            raise _FieldRuleError(field, "required for EVALQ_JUDGE=chat")
        if self.visibility_timeout_s is not None and self.visibility_timeout_s < self.evaluation_s:
            raise _FieldRuleError(
                "visibility_timeout_s",
                f"must be at least one evaluation's budget and margin ({self.evaluation_s:g} s)",
            )
        return self

    # -- derived values -------------------------------------------------------------------------

    @property
    def evaluation(self) -> EvaluationConfig:
        """The evaluation configuration (validated already, as these fields are)."""
        return EvaluationConfig.model_validate(
            {name: getattr(self, name) for name in EvaluationConfig.model_fields}
        )

    @property
    def retry(self) -> RetryConfig:
        """The retry configuration (``[retry]``, ``EVALQ_RETRY_*``)."""
        return RetryConfig(
            reasons=self.retry_reasons,
            max_attempts=self.retry_max_attempts,
            backoff_s=self.retry_backoff_s,
        )

    @property
    def api_key(self) -> SecretStr | None:
        """The judge key: ``EVALQ_JUDGE_API_KEY``, or ``TYPESAFE_API_KEY`` for System One only."""
        if self.judge_api_key is not None:
            return self.judge_api_key
        return self.typesafe_api_key if self.judge is JudgeKind.SYSTEMONE else None

    @property
    def effective_thresholds(self) -> Thresholds:
        """Configured thresholds, or the demo pair (synthetic judge only)."""
        pair = self.thresholds or DEMO_THRESHOLDS
        return Thresholds(pair[0], pair[1])

    @property
    def limits(self) -> Limits:
        """The engine limits: budget, questions per request, state size."""
        return Limits(
            budget_s=self.budget_s,
            max_questions=self.max_questions,
            max_state_chars=self.max_state_chars,
        )

    @property
    def thresholds_are_demo(self) -> bool:
        """True when the uncalibrated demo pair is in use (so records and summaries say so)."""
        return self.thresholds is None

    @property
    def process_concurrency(self) -> int:
        """Evaluation slots (and unacked messages) of ONE consumer process: an even share of
        ``concurrency`` over ``processes`` (at least one each)."""
        return max(1, math.ceil(self.concurrency / self.processes))

    @property
    def longest_task_s(self) -> float:
        """Worst-case time from a message's fetch to its ack.

        A process holds at most ``PREFETCH_MULTIPLIER`` messages per slot, each of at most
        ``batch_size`` snapshots, so a message's last snapshot waits at most that many budgets
        for a slot and its own evaluation, plus a margin (store, loop).
        """
        return self.budget_s * self.batch_size * PREFETCH_MULTIPLIER + BACKSTOP_MARGIN_S

    @property
    def shutdown_drain_s(self) -> float:
        """Longest a warm shutdown waits for the messages it holds.

        At a warm shutdown no evaluation starts any more (:meth:`Runtime.stop_starting
        <worker.runtime.Runtime.stop_starting>`): those running finish within one evaluation,
        their records are written (a second margin), and every message with an evaluation that
        never started goes back to the broker. Whatever the batch size: budget_s + 4 s
        instead of :attr:`longest_task_s` (16 budgets at the default batch of 8).
        """
        return self.evaluation_s + BACKSTOP_MARGIN_S

    @property
    def evaluation_s(self) -> float:
        """Longest one evaluation takes once it has a slot: its budget plus the backstop margin."""
        return self.budget_s + BACKSTOP_MARGIN_S

    @property
    def effective_visibility_timeout_s(self) -> float:
        """Redis visibility timeout: the override, else 4 x one evaluation, at least 60 s.

        A worker renews the lease of every message it holds every quarter of this timeout
        (:mod:`worker.broker`), so a long batch is never redelivered while it is being worked
        on, and a dead worker's messages come back within this timeout plus one restore sweep.
        """
        if self.visibility_timeout_s is not None:
            return self.visibility_timeout_s
        return max(60.0, math.ceil(4 * self.evaluation_s))

    @property
    def lane_groups(self) -> tuple[tuple[Lane, ...], ...]:
        """The lanes served apart: the live lane alone when other lanes are served too (by
        processes of its own under ``evalq worker``, by a runtime of its own in one process)."""
        if Lane.LIVE not in self.lanes or len(self.lanes) == 1:
            return (self.lanes,)
        return ((Lane.LIVE,), tuple(lane for lane in self.lanes if lane is not Lane.LIVE))

    @property
    def queues(self) -> tuple[str, ...]:
        """Broker queue names of the configured lanes, in priority order (live first)."""
        order = (Lane.LIVE, Lane.BACKFILL, Lane.OUTCOMES)
        return tuple(LANE_QUEUES[lane] for lane in order if lane in self.lanes)

    def require_broker(self) -> str:
        """The broker URL, or :class:`ConfigError` naming ``EVALQ_BROKER_URL``."""
        if self.broker_url is None:
            raise ConfigError(
                "EVALQ_BROKER_URL: not set (e.g. redis://127.0.0.1:6379/0); "
                "`evalq run` starts an embedded Redis when it is unset"
            )
        return self.broker_url


class _FieldRuleError(ValueError):
    """A cross-field rule broke; carries the field it should be reported under."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _env_name(loc: tuple[int | str, ...]) -> str:
    if not loc:
        return "EVALQ_CONFIG"
    field = str(loc[0])
    if field == "TYPESAFE_API_KEY":
        return field
    return ENV_PREFIX + field.upper()


def _describe(error: Any, from_file: Mapping[str, Any], path: Path | None) -> str:
    """One problem, named by where its value came from: the file's key or the variable."""
    ctx = error.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, _FieldRuleError):
        return f"{ENV_PREFIX}{cause.field.upper()}: {cause}"
    message = str(cause) if cause is not None else error["msg"]
    loc = tuple(error["loc"])
    if loc and loc[0] in from_file:
        return f"{path} {file_location(str(loc[0]))}: {message}"
    return f"{_env_name(loc)}: {message}"


# -- the EVALQ_* names this version knows (defined here once; tests/test_variables.py checks
#    that every name the source, tests, bench, ops and README mention is one of them) ----------

COMMAND_VARIABLES = frozenset(
    {
        "EVALQ_WORKER_HOSTNAME",
        "EVALQ_FORMAT",
        "EVALQ_UNIT",
        "EVALQ_ENQUEUE_LANE",
        "EVALQ_BACKFILL_BATCH_SIZE",
        "EVALQ_BACKFILL_MAX_DEPTH",
        "EVALQ_BACKFILL_RATE",
        "EVALQ_BACKFILL_RESUME",
        "EVALQ_BACKFILL_ID",
        "EVALQ_OUTCOME_FILE",
        "EVALQ_OUTCOME_EVENT_ID",
        "EVALQ_OUTCOME_TRACE_ID",
        "EVALQ_OUTCOME_NAME",
        "EVALQ_OUTCOME_VALUE",
        "EVALQ_OUTCOME_OBSERVED_AT",
        "EVALQ_OUTCOME_SESSION_ID",
        "EVALQ_OUTCOME_UNIT_EVENT_ID",
        "EVALQ_REDRIVE_REASON",
        "EVALQ_RETRY_METRIC",
        "EVALQ_RETRY_SINCE",
        "EVALQ_RETRY_BACKFILL",
        "EVALQ_REPORT_JSON",
        "EVALQ_REPORT_HTML",
        "EVALQ_REPORT_SINCE",
        "EVALQ_REPORT_UNTIL",
        "EVALQ_REPORT_BACKFILL",
        "EVALQ_REPORT_METRICS",
        "EVALQ_REPORT_METRIC_SET",
        "EVALQ_REPORT_METRIC_SET_VERSION",
        "EVALQ_REPORT_AGENT_VERSION",
        "EVALQ_REPORT_TOOL",
        "EVALQ_REPORT_ENVIRONMENT",
        "EVALQ_REPORT_SCENARIO_BY",
        "EVALQ_REPORT_SLICE_BY",
        "EVALQ_REPORT_LANE",
        "EVALQ_REPORT_POOL_VERSIONS",
        "EVALQ_REPORT_FAIL_UNDER",
        "EVALQ_REPORT_MIN_COVERAGE",
        "EVALQ_RESULTS_METRIC",
        "EVALQ_RESULTS_STATUS",
        "EVALQ_RESULTS_REASON",
        "EVALQ_RESULTS_SINCE",
        "EVALQ_RESULTS_LIMIT",
        "EVALQ_RESULTS_CURSOR",
        "EVALQ_RESULTS_JSON",
        "EVALQ_SHOW_JSON",
        "EVALQ_RESULTS_SUPERSEDED",
        "EVALQ_STATUS_JSON",
        "EVALQ_STATUS_WINDOW_S",
        "EVALQ_STATUS_STALE_AFTER_S",
        "EVALQ_STATUS_INSPECT_TIMEOUT_S",
        "EVALQ_STATUS_MAX_DEPTH",
        "EVALQ_STATUS_MAX_OLDEST_AGE_S",
        "EVALQ_STATUS_MAX_DEAD_LETTERS",
        "EVALQ_STATUS_MIN_WORKERS",
        "EVALQ_STATUS_MIN_RECENT_5M",
        "EVALQ_RUN_TIMEOUT_S",
        "EVALQ_RUN_WORKER",
        "EVALQ_PURGE_CONTENT_BEFORE",
        "EVALQ_QUEUE_EXPORTER_ADDR",
        "EVALQ_QUEUE_EXPORTER_PORT",
        "EVALQ_QUEUE_EXPORTER_KEYPREFIX",
        "EVALQ_UI_HOST",
        "EVALQ_UI_PORT",
    }
)
"""Environment twins of command-only CLI flags (``envvar=`` of the commands; a test compares)."""
INTERNAL_VARIABLES = frozenset(
    {"EVALQ_SUPERVISOR_PID", "EVALQ_BESIDE_LIVE", "EVALQ_AUDIT_REQUIRED"}
)
"""Set by evalq itself (a supervisor for its children) or read by the CI scripts (``.ci/``)."""
TEST_PREFIX = "EVALQ_TEST_"
"""Reserved for the test suite and benchmarks (``EVALQ_TEST_POSTGRES_URL``, ``EVALQ_TEST_SOAK``)."""


def known_variables() -> frozenset[str]:
    """Every ``EVALQ_*`` name this version reads: settings, command flags' twins, internal ones."""
    fields = {
        ENV_PREFIX + name.upper() for name in Settings.model_fields if name != "typesafe_api_key"
    }
    return frozenset(fields | COMMAND_VARIABLES | INTERNAL_VARIABLES)


def is_known_variable(name: str) -> bool:
    """Whether ``name`` is read by this version (or reserved for tests); REMOVED ones are not."""
    return name.startswith(TEST_PREFIX) or name in known_variables()


def _unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """Each ``EVALQ_*`` variable nobody reads, with the closest known name."""
    known = known_variables()
    found = []
    for name in sorted(environ):
        upper = name.upper()
        if upper.startswith(ENV_PREFIX) and upper not in REMOVED and not is_known_variable(upper):
            found.append(f"{name}: unknown variable{_suggestion(upper, known)}")
    return found


def _removed_variables(environ: Mapping[str, str]) -> list[str]:
    """A variable this version no longer reads fails the start, saying what replaced it."""
    return [f"{name}: removed; {why}" for name, why in REMOVED.items() if name in environ]


def _config_path(given: Mapping[str, Any], environ: Mapping[str, str]) -> Path | None:
    chosen = given.get("config") or environ.get(ENV_PREFIX + "CONFIG")
    return Path(chosen) if chosen else None


def _file_values(
    path: Path | None, given: Mapping[str, Any], environ: Mapping[str, str], problems: list[str]
) -> dict[str, Any]:
    """The file's values that neither a flag nor a variable overrides (the later source wins)."""
    if path is None:
        return {}
    values, found = read_config_file(path, file_fields())
    problems.extend(found)
    set_in_env = {name.upper() for name in environ}
    return {
        key: value
        for key, value in values.items()
        if key not in given and ENV_PREFIX + key.upper() not in set_in_env
    }


def load_settings(**overrides: Any) -> Settings:
    """Build :class:`Settings` from the file, the environment and explicit overrides (CLI flags).

    ``None`` overrides are ignored, so a CLI can pass every flag through unchanged. Every problem
    found (removed or unknown variables, the file's keys, invalid values) is in the one
    :class:`ConfigError`.
    """
    given = {key: value for key, value in overrides.items() if value is not None}
    environ = os.environ
    problems = [*_removed_variables(environ), *_unknown_variables(environ)]
    path = _config_path(given, environ)
    from_file = _file_values(path, given, environ, problems)
    settings = None
    try:
        settings = Settings(**from_file, **given)
    except ValidationError as exc:
        errors = exc.errors(include_input=False)
        problems.extend(_describe(error, from_file, path) for error in errors)
    if problems or settings is None:
        raise ConfigError(*problems)
    return settings
