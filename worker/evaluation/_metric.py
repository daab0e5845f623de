"""The metric contract (docs/semantics.md §2) and the id rule shared by metrics and questions."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from worker.judges import Answer, Question

    from ._result import MetricResult
    from ._trace import Trace

__all__ = ["ID_PATTERN", "Metric", "check_id"]

ID_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def check_id(value: str, what: str = "metric id") -> str:
    """Return ``value`` if it matches :data:`ID_PATTERN` in full, else raise ``ValueError``."""
    if not isinstance(value, str) or ID_PATTERN.fullmatch(value) is None:
        raise ValueError(f"invalid {what}: must match ^[A-Za-z][A-Za-z0-9_]{{0,63}}$")
    return value


@runtime_checkable
class Metric(Protocol):
    """What the evaluator needs from a metric. ``id``/``version`` may be attributes or properties.

    - ``precheck`` returns a final result (usually SKIPPED) or ``None`` to continue.
    - ``state`` returns a deterministic JSON map of the evidence the judge should see.
    - ``questions`` maps local question ids to typed questions (may be empty).
    - ``reduce`` maps ``{local id: answer}`` to a result (``{}`` when there are no questions).
    """

    @property
    def id(self) -> str: ...

    @property
    def version(self) -> str: ...

    def precheck(self, trace: Trace) -> MetricResult | None: ...

    def state(self, trace: Trace) -> Mapping[str, Any]: ...

    def questions(self, trace: Trace) -> Mapping[str, Question]: ...

    def reduce(self, answers: Mapping[str, Answer], trace: Trace) -> MetricResult: ...
