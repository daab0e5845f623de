"""The base of every report and status model: frozen, no unknown fields."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Frozen"]


class Frozen(BaseModel):
    """A frozen pydantic model that refuses unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")
