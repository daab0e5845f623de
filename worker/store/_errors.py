"""Store exceptions and the one boundary where driver exceptions become them.

Every database call of the store runs inside :func:`translating`, so callers only ever see
:class:`StoreError` subclasses. Messages are fixed reason codes plus the driver's exception class
and SQLSTATE: never the driver's text, which may quote SQL, values or host names.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg_pool import PoolClosed, PoolTimeout

__all__ = [
    "AppendOnlyError",
    "PermanentStoreError",
    "StoreError",
    "TransientStoreError",
    "translating",
]

APPEND_ONLY_SQLSTATE = "EQ001"
"""SQLSTATE raised by the PostgreSQL append-only trigger function (a code of our own)."""

# Retrying can help: serialization failure, deadlock, lock timeout, and the whole classes of
# connection exceptions (08), insufficient resources (53) and operator intervention (57:
# admin shutdown, cannot connect now, statement cancelled).
_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03"})
_TRANSIENT_CLASSES = frozenset({"08", "53", "57"})
_PG_DISK_FULL = "53100"
_PG_DENIED = "42501"  # insufficient_privilege: e.g. an INSERT/SELECT role asked for DDL
_SQLITE_TRANSIENT = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
# A full disk (or max_page_count reached), an I/O error, a file that cannot be opened right now
# or was moved: nothing was committed and nothing about the message is wrong, so it must stay
# unacked (requeued with back-off), never become a dead letter.
_SQLITE_RESOURCE = {
    sqlite3.SQLITE_FULL: "STORE_FULL",
    sqlite3.SQLITE_IOERR: "STORE_IO_ERROR",
    sqlite3.SQLITE_CANTOPEN: "STORE_UNAVAILABLE",
}
_SQLITE_READONLY_DBMOVED = 1032  # SQLITE_READONLY | (4 << 8): the file was renamed or unlinked


class StoreError(Exception):
    """Base of every store error; ``code`` is a reason code safe to record and log."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code} ({detail})" if detail else code)
        self.code = code


class TransientStoreError(StoreError):
    """Retrying later can succeed: leave the message unacked (it was not recorded).

    Codes: ``STORE_UNAVAILABLE`` (cannot connect / open), ``STORE_BUSY`` (SQLite locked),
    ``STORE_FULL`` (disk full, SQLite ``SQLITE_FULL`` / PostgreSQL 53100), ``STORE_IO_ERROR``
    (SQLite I/O error) and ``STORE_REPLACED`` (the SQLite file was deleted or replaced under
    this process: it refuses every later transaction until restarted).
    """


class PermanentStoreError(StoreError):
    """Retrying cannot help (unknown reference, closed store, schema problem)."""


class AppendOnlyError(PermanentStoreError):
    """The database refused an UPDATE, DELETE or TRUNCATE of a recorded row."""


_PG_BY_STATE: dict[str, tuple[type[StoreError], str]] = {
    APPEND_ONLY_SQLSTATE: (AppendOnlyError, "APPEND_ONLY"),
    _PG_DISK_FULL: (TransientStoreError, "STORE_FULL"),
    _PG_DENIED: (PermanentStoreError, "STORE_PERMISSION_DENIED"),
}


def _from_psycopg(exc: psycopg.Error) -> StoreError:
    state = exc.sqlstate
    detail = f"{type(exc).__module__}.{type(exc).__name__}, sqlstate {state}"
    if isinstance(exc, PoolClosed):
        return PermanentStoreError("STORE_CLOSED", detail)
    if (known := _PG_BY_STATE.get(state or "")) is not None:
        kind, code = known
        return kind(code, detail)
    if state in _TRANSIENT_SQLSTATES or (state is not None and state[:2] in _TRANSIENT_CLASSES):
        return TransientStoreError("STORE_UNAVAILABLE", detail)
    # No SQLSTATE on an OperationalError means the client lost or never got a connection
    # (refused, reset, pool timeout): the server may well be back soon.
    if state is None and isinstance(exc, psycopg.OperationalError | PoolTimeout):
        return TransientStoreError("STORE_UNAVAILABLE", detail)
    return PermanentStoreError("STORE_FAILED", detail)


def _from_sqlite(exc: sqlite3.Error) -> StoreError:
    name = getattr(exc, "sqlite_errorname", None)
    code = getattr(exc, "sqlite_errorcode", None)
    detail = f"sqlite3.{type(exc).__name__}, {name}"
    if name == "SQLITE_CONSTRAINT_TRIGGER":
        return AppendOnlyError("APPEND_ONLY", detail)
    if code is None:
        return PermanentStoreError("STORE_FAILED", detail)
    if code & 0xFF in _SQLITE_TRANSIENT:
        return TransientStoreError("STORE_BUSY", detail)
    if code == _SQLITE_READONLY_DBMOVED:
        return TransientStoreError("STORE_REPLACED", detail)
    if (reason := _SQLITE_RESOURCE.get(code & 0xFF)) is not None:
        return TransientStoreError(reason, detail)
    return PermanentStoreError("STORE_FAILED", detail)


@contextmanager
def translating() -> Iterator[None]:
    """Turn driver exceptions raised inside the block into :class:`StoreError` subclasses."""
    try:
        yield
    except sqlite3.Error as exc:
        raise _from_sqlite(exc) from None
    except psycopg.Error as exc:
        raise _from_psycopg(exc) from None
