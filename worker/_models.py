"""Model instances from values whose rules the caller has already checked.

pydantic's ``model_construct`` looks up every field's alias and default on each call, which cost
more than validating a small record (measured: ~3.4 us for a metric result record, seven a
snapshot). :func:`assemble` sets the same four slots that ``model_construct`` sets;
``tests/properties/test_records.py`` and ``tests/properties/test_results.py`` pin the instances
it builds to ``model_construct`` and to validation, so a pydantic release that stores instance
state differently fails those tests instead of building broken records.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["assemble"]

_M = TypeVar("_M", bound=BaseModel)
_set = object.__setattr__


def assemble(
    cls: type[_M],
    values: dict[str, Any],
    fields_set: set[str],
    private: dict[str, Any] | None = None,
) -> _M:
    """The instance validation would build from fields it accepts, given their final values.

    ``values`` holds every field in declaration order (dumps follow it); ``private`` the private
    attributes' defaults, a fresh dict per instance (``None`` for models without any).
    """
    model = cls.__new__(cls)
    _set(model, "__dict__", values)
    _set(model, "__pydantic_fields_set__", fields_set)
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", private)
    return model
