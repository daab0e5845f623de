"""One configuration object per process: :class:`Settings`, read from ``EVALQ_*`` variables.

Every CLI flag has an environment twin (the flag wins). Invalid configuration fails at start with
:class:`ConfigError`, whose message names the variable (``EVALQ_THRESHOLDS: ...``) and never echoes
the offending value (it could be a key).

Sizing that the broker depends on lives here too, so producers, workers and ``evalq run`` compute
the same numbers from the same inputs (``longest_task_s`` → ``visibility_timeout_s``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from producer.topology import LANE_QUEUES, Lane
from worker.evaluation import Limits, Thresholds, check_id
from worker.judges import check_base_url

__all__ = [
    "BACKSTOP_MARGIN_S",
    "DEMO_THRESHOLDS",
    "ENV_PREFIX",
    "PREFETCH_MULTIPLIER",
    "REMOVED",
    "ConfigError",
    "JudgeKind",
    "Settings",
    "load_settings",
]

ENV_PREFIX = "EVALQ_"
DEMO_THRESHOLDS = (0.2, 0.8)
"""Uncalibrated demo pair; only ever used with the synthetic judge, and labelled ``demo``."""
PREFETCH_MULTIPLIER = 2
"""Unacked messages a consumer process holds per evaluation slot (Celery prefetch multiplier)."""
BACKSTOP_MARGIN_S = 2.0
"""Slack above the engine budget before the task's own backstop fires (planning, store, loop)."""
METRIC_SET_NAMES = ("agent", "agent+trajectory")
_BROKER_SCHEMES = ("redis", "rediss", "amqp", "amqps", "pyamqp", "sentinel")
_STORE_SCHEMES = ("sqlite", "postgresql", "postgres")


class ConfigError(ValueError):
    """Invalid configuration; the message starts with the name of the variable."""


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


def _default_processes() -> int:
    """One consumer process per core this process may run on."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)


def _comma_list(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _scheme(url: str) -> str:
    return urlsplit(url).scheme.lower()


class Settings(BaseSettings):
    """Everything a worker, producer or ``evalq run`` needs, from ``EVALQ_*`` variables."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, frozen=True, extra="forbid", populate_by_name=True
    )

    broker_url: str | None = None
    store_url: str = "sqlite:///evalq.db"
    judge: JudgeKind = JudgeKind.SYNTHETIC
    judge_url: str | None = None
    judge_model: str | None = None
    judge_api_key: SecretStr | None = None
    typesafe_api_key: SecretStr | None = Field(default=None, validation_alias="TYPESAFE_API_KEY")
    budget_s: float = Field(default=3.0, gt=0, le=300)
    thresholds: Annotated[tuple[float, ...] | None, NoDecode] = None
    max_questions: int = Field(default=128, ge=1, le=512)
    max_state_chars: int = Field(default=100_000, ge=1, le=1_000_000)
    metric_set: str = "agent"
    outcome_criteria: Annotated[tuple[str, ...], NoDecode] = ()
    lanes: Annotated[tuple[Lane, ...], NoDecode] = (Lane.LIVE, Lane.BACKFILL, Lane.OUTCOMES)
    concurrency: int = Field(default=256, ge=1, le=65_536)
    processes: int = Field(default_factory=_default_processes, ge=1, le=256)
    batch_size: int = Field(default=4, ge=1, le=1000)
    nice: int = Field(default=0, ge=0, le=19)
    visibility_timeout_s: float | None = Field(default=None, gt=0)
    restore_interval_s: float = Field(default=5.0, gt=0, le=60)
    log_level: str = "INFO"
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_addr: str = "127.0.0.1"

    @field_validator("thresholds", mode="before")
    @classmethod
    def _parse_thresholds(cls, value: Any) -> Any:
        value = _comma_list(value)
        if value is not None and len(value) != 2:
            raise ValueError("expected two numbers 'fail,pass', e.g. '0.2,0.8'")
        return value

    @field_validator("outcome_criteria", "lanes", mode="before")
    @classmethod
    def _parse_list(cls, value: Any) -> Any:
        return _comma_list(value)

    @field_validator("thresholds")
    @classmethod
    def _check_thresholds(cls, value: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if value is not None:
            Thresholds(value[0], value[1])
        return value

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
                "thresholds", "required for a non-synthetic judge (e.g. '0.2,0.8')"
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


def _describe(error: Any) -> str:
    ctx = error.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, _FieldRuleError):
        return f"{ENV_PREFIX}{cause.field.upper()}: {cause}"
    message = str(cause) if cause is not None else error["msg"]
    return f"{_env_name(tuple(error['loc']))}: {message}"


def load_settings(**overrides: Any) -> Settings:
    """Build :class:`Settings` from the environment plus explicit overrides (CLI flags win).

    ``None`` overrides are ignored, so a CLI can pass every flag through unchanged.
    """
    given = {key: value for key, value in overrides.items() if value is not None}
    _refuse_removed(os.environ)
    try:
        return Settings(**given)
    except ValidationError as exc:
        problems = "; ".join(_describe(error) for error in exc.errors(include_input=False))
        raise ConfigError(problems) from None


def _refuse_removed(environ: Mapping[str, str]) -> None:
    """A variable this version no longer reads fails the start, saying what replaced it."""
    found = [f"{name}: removed; {why}" for name, why in REMOVED.items() if name in environ]
    if found:
        raise ConfigError("; ".join(found))
