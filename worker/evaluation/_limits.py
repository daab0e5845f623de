"""The limits every evaluation runs under: one total time budget, question and state-size caps."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["Limits"]


class Limits(BaseModel):
    """One evaluation's total time budget and its question and state-size caps (all positive)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    budget_s: float = Field(default=3.0, gt=0)
    max_questions: int = Field(default=128, gt=0)
    max_state_chars: int = Field(default=100_000, gt=0)

    def __init__(
        self,
        budget_s: float = 3.0,
        max_questions: int = 128,
        max_state_chars: int = 100_000,
        **kw: Any,
    ) -> None:
        # Strict mode rejects ints for a float field; a whole-second budget is still a budget.
        if isinstance(budget_s, int) and not isinstance(budget_s, bool):
            budget_s = float(budget_s)
        super().__init__(
            budget_s=budget_s, max_questions=max_questions, max_state_chars=max_state_chars, **kw
        )

    @field_validator("budget_s")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("budget_s must be finite")
        return value
