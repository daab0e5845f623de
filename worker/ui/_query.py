"""Query-string filters of the pages: a record scope (time, slice, version, backfill), a result
filter (status, reason, verdict) and the page cursor. Bad input is a reason code, never echoed."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from urllib.parse import urlencode

from worker.reporting import STATUSES, parse_when
from worker.store import MAX_PAGE, RecordScope, ResultFilter

__all__ = [
    "PAGE_SIZE",
    "SCOPE_KEYS",
    "BadQuery",
    "before_cursor",
    "page_size",
    "query_string",
    "record_scope",
    "result_filter",
]

PAGE_SIZE = 50
SCOPE_KEYS = (
    "since",
    "until",
    "agent_version",
    "environment",
    "tool",
    "metric_set_version",
    "backfill",
)
_TEXT_CHARS = 200


class BadQuery(ValueError):
    """A query parameter that cannot be used: ``.field`` and a reason ``.code``."""

    def __init__(self, field: str, code: str) -> None:
        super().__init__(f"{field}: {code}")
        self.field = field
        self.code = code


def _text(params: Mapping[str, str], key: str) -> str | None:
    value = params.get(key, "").strip()
    if not value:
        return None
    if len(value) > _TEXT_CHARS:
        raise BadQuery(key, "TOO_LONG")
    return value


def _when(params: Mapping[str, str], key: str, now: datetime) -> datetime | None:
    value = _text(params, key)
    if value is None:
        return None
    try:
        return parse_when(value, now)
    except ValueError:
        raise BadQuery(key, "BAD_TIME") from None


def record_scope(params: Mapping[str, str], now: datetime | None = None) -> RecordScope:
    """The store-side scope of the scope parameters: like ``evalq report``, each unit counted
    once per metric-set version, with its newest evaluation (``RecordScope.newest``)."""
    moment = now or datetime.now(UTC)
    return RecordScope(
        since=_when(params, "since", moment),
        until=_when(params, "until", moment),
        agent_version=_text(params, "agent_version"),
        environment=_text(params, "environment"),
        tool=_text(params, "tool"),
        metric_set_version=_text(params, "metric_set_version"),
        backfill_id=_text(params, "backfill"),
        newest=True,
    )


def _passed(params: Mapping[str, str]) -> bool | None:
    value = params.get("passed", "").strip().lower()
    if value in ("", "any"):
        return None
    if value in ("true", "false"):
        return value == "true"
    raise BadQuery("passed", "BAD_VERDICT")


def result_filter(metric_id: str, params: Mapping[str, str]) -> ResultFilter:
    """Which results of ``metric_id`` to list (status, reason, verdict)."""
    status = _text(params, "status")
    if status is not None and status not in STATUSES:
        raise BadQuery("status", "UNKNOWN_STATUS")
    return ResultFilter.model_validate(
        {
            "metric_id": metric_id,
            "status": status,
            "reason": _text(params, "reason"),
            "passed": _passed(params),
        }
    )


def _integer(params: Mapping[str, str], key: str) -> int | None:
    value = params.get(key, "").strip()
    if not value:
        return None
    if not value.isdigit() or len(value) > 18:
        raise BadQuery(key, "BAD_NUMBER")
    return int(value)


def before_cursor(params: Mapping[str, str]) -> int | None:
    """The page cursor (an evaluation sequence number), None for the first page."""
    return _integer(params, "before")


def page_size(params: Mapping[str, str]) -> int:
    """Rows per page: ``limit`` within 1..MAX_PAGE, PAGE_SIZE by default."""
    size = _integer(params, "limit")
    if size is None:
        return PAGE_SIZE
    if not 1 <= size <= MAX_PAGE:
        raise BadQuery("limit", "OUT_OF_RANGE")
    return size


def query_string(params: Mapping[str, str], keys: tuple[str, ...], **changes: object) -> str:
    """``?k=v&…`` of the given keys of ``params`` with ``changes`` applied (None drops one)."""
    chosen: dict[str, object] = {k: params[k] for k in keys if params.get(k)}
    for key, value in changes.items():
        if value is None:
            chosen.pop(key, None)
        else:
            chosen[key] = value
    return "?" + urlencode(chosen) if chosen else ""
