"""Metric results, statuses, reason codes and thresholds (jev-semantics §C.2, §D.1)."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from worker._json import FrozenJson, JsonValue

__all__ = ["MetricResult", "Reason", "Status", "Thresholds"]


class Status(StrEnum):
    """The only four outcomes of a metric. Values equal the names."""

    DECIDED = "DECIDED"
    INCONCLUSIVE = "INCONCLUSIVE"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"


class Reason:
    """Reason codes (plain ``str``). Custom metrics may use codes of their own."""

    DECIDED = "DECIDED"
    INCONCLUSIVE = "INCONCLUSIVE"
    ALL_CLAIMS_REQUIRED = "ALL_CLAIMS_REQUIRED"
    UNCERTAIN_CLAIM = "UNCERTAIN_CLAIM"
    MISSING_FIELDS = "MISSING_FIELDS"
    NO_TOOL_RESULTS = "NO_TOOL_RESULTS"
    NO_EVIDENCE = "NO_EVIDENCE"
    NO_CLAIMS = "NO_CLAIMS"
    INCOMPLETE_TRACE = "INCOMPLETE_TRACE"
    EVALUATION_LIMIT = "EVALUATION_LIMIT"
    DEFINITION_ERROR = "DEFINITION_ERROR"
    REDUCE_ERROR = "REDUCE_ERROR"
    INVALID_RESPONSE = "INVALID_RESPONSE"
    BACKEND_ERROR = "BACKEND_ERROR"
    TIMEOUT = "TIMEOUT"


class MetricResult(BaseModel):
    """One metric's outcome. ``passed`` is only ever set on DECIDED; ``reason`` is a code."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Status
    score: float | None = None
    passed: bool | None = None
    label: str | None = None
    reason: str
    evidence: FrozenJson = Field(default_factory=dict, validate_default=True)

    @model_validator(mode="after")
    def _rules(self) -> MetricResult:
        if self.score is not None and not (math.isfinite(self.score) and 0 <= self.score <= 1):
            raise ValueError("score must be a finite number in [0, 1] or None")
        if self.passed is not None and self.status is not Status.DECIDED:
            raise ValueError("passed must be None unless status is DECIDED")
        if not self.reason.strip():
            raise ValueError("reason must be a non-blank code")
        if not hasattr(self.evidence, "keys"):
            raise ValueError("evidence must be a JSON object")
        return self

    @classmethod
    def skipped(cls, reason: str) -> MetricResult:
        """A SKIPPED result with only a reason."""
        return cls(status=Status.SKIPPED, reason=reason)

    @classmethod
    def error(cls, reason: str) -> MetricResult:
        """An ERROR result with only a reason."""
        return cls(status=Status.ERROR, reason=reason)


class Thresholds(BaseModel):
    """Two thresholds with no defaults: ``0 <= fail_at_or_below < pass_at_or_above <= 1``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fail_at_or_below: float
    pass_at_or_above: float

    def __init__(self, fail_at_or_below: float, pass_at_or_above: float, **kw: Any) -> None:
        super().__init__(fail_at_or_below=fail_at_or_below, pass_at_or_above=pass_at_or_above, **kw)

    @model_validator(mode="after")
    def _ordered(self) -> Thresholds:
        fail, pass_ = self.fail_at_or_below, self.pass_at_or_above
        if not (math.isfinite(fail) and math.isfinite(pass_) and 0 <= fail < pass_ <= 1):
            raise ValueError(
                "thresholds must satisfy 0 <= fail_at_or_below < pass_at_or_above <= 1"
            )
        return self

    def assess(self, score: float, evidence: JsonValue = None) -> MetricResult:
        """DECIDED when ``score <= fail`` or ``score >= pass`` (inclusive), else INCONCLUSIVE."""
        ev = {} if evidence is None else evidence
        if score <= self.fail_at_or_below or score >= self.pass_at_or_above:
            passed = score >= self.pass_at_or_above
            return MetricResult(
                status=Status.DECIDED,
                score=score,
                passed=passed,
                reason=Reason.DECIDED,
                evidence=ev,
            )
        return MetricResult(
            status=Status.INCONCLUSIVE, score=score, reason=Reason.INCONCLUSIVE, evidence=ev
        )

    def tag(self) -> str:
        """Compact text of the pair, used inside metric versions (e.g. ``0.2-0.8``)."""
        return f"{self.fail_at_or_below:g}-{self.pass_at_or_above:g}"
