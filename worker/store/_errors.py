"""Store exceptions and the one boundary where driver exceptions become them.

Every database call of the store runs inside :func:`translating`, so callers only ever see
:class:`StoreError` subclasses. Messages are fixed reason codes plus the driver's exception class
and SQLSTATE: never the driver's text, which may quote SQL, values or host names.
"""

from __future__ import annotations

import enum
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg_pool import PoolClosed, PoolTimeout

__all__ = [
    "AppendOnlyError",
    "PermanentStoreError",
    "StoreCode",
    "StoreError",
    "TransientStoreError",
    "translating",
]


class StoreCode(enum.StrEnum):
    """Every reason code the store's errors and readers carry, defined once."""

    #: the store was closed in this process
    STORE_CLOSED = "STORE_CLOSED"
    #: the database cannot be reached or opened right now (transient)
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    #: the database failed the call for a reason no retry mends
    STORE_FAILED = "STORE_FAILED"
    #: no writer turn or lock within the busy timeout (transient)
    STORE_BUSY = "STORE_BUSY"
    #: the SQLite file was deleted or replaced under the process (transient, never held: it halts)
    STORE_REPLACED = "STORE_REPLACED"
    #: the disk (or SQLite's page limit) is full (transient)
    STORE_FULL = "STORE_FULL"
    #: an I/O error (transient)
    STORE_IO_ERROR = "STORE_IO_ERROR"
    #: the role may not do this (e.g. DDL by an INSERT/SELECT role)
    STORE_PERMISSION_DENIED = "STORE_PERMISSION_DENIED"
    #: an UPDATE or DELETE the append-only triggers refused
    APPEND_ONLY = "APPEND_ONLY"
    #: the schema is old or missing and this role cannot create it
    SCHEMA_NOT_MIGRATED = "SCHEMA_NOT_MIGRATED"
    #: the database was migrated by a newer evalq
    SCHEMA_TOO_NEW = "SCHEMA_TOO_NEW"
    #: the file system refused SQLite's WAL mode
    WAL_UNAVAILABLE = "WAL_UNAVAILABLE"
    #: no snapshot with this id (or prefix) is stored
    UNKNOWN_SNAPSHOT = "UNKNOWN_SNAPSHOT"
    #: no dead letter with this id is stored
    UNKNOWN_DEAD_LETTER = "UNKNOWN_DEAD_LETTER"
    #: a stored snapshot content fails its hash
    CONTENT_MISMATCH = "CONTENT_MISMATCH"
    #: a purge expired the snapshot's content (its records stay)
    CONTENT_NOT_KEPT = "CONTENT_NOT_KEPT"


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
    sqlite3.SQLITE_FULL: StoreCode.STORE_FULL,
    sqlite3.SQLITE_IOERR: StoreCode.STORE_IO_ERROR,
    sqlite3.SQLITE_CANTOPEN: StoreCode.STORE_UNAVAILABLE,
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
    APPEND_ONLY_SQLSTATE: (AppendOnlyError, StoreCode.APPEND_ONLY),
    _PG_DISK_FULL: (TransientStoreError, StoreCode.STORE_FULL),
    _PG_DENIED: (PermanentStoreError, StoreCode.STORE_PERMISSION_DENIED),
}


def _from_psycopg(exc: psycopg.Error) -> StoreError:
    state = exc.sqlstate
    detail = f"{type(exc).__module__}.{type(exc).__name__}, sqlstate {state}"
    if isinstance(exc, PoolClosed):
        return PermanentStoreError(StoreCode.STORE_CLOSED, detail)
    if (known := _PG_BY_STATE.get(state or "")) is not None:
        kind, code = known
        return kind(code, detail)
    if state in _TRANSIENT_SQLSTATES or (state is not None and state[:2] in _TRANSIENT_CLASSES):
        return TransientStoreError(StoreCode.STORE_UNAVAILABLE, detail)
    # No SQLSTATE on an OperationalError means the client lost or never got a connection
    # (refused, reset, pool timeout): the server may well be back soon.
    if state is None and isinstance(exc, psycopg.OperationalError | PoolTimeout):
        return TransientStoreError(StoreCode.STORE_UNAVAILABLE, detail)
    return PermanentStoreError(StoreCode.STORE_FAILED, detail)


def _from_sqlite(exc: sqlite3.Error) -> StoreError:
    name = getattr(exc, "sqlite_errorname", None)
    code = getattr(exc, "sqlite_errorcode", None)
    detail = f"sqlite3.{type(exc).__name__}, {name}"
    if name == "SQLITE_CONSTRAINT_TRIGGER":
        return AppendOnlyError(StoreCode.APPEND_ONLY, detail)
    if code is None:
        return PermanentStoreError(StoreCode.STORE_FAILED, detail)
    if code & 0xFF in _SQLITE_TRANSIENT:
        return TransientStoreError(StoreCode.STORE_BUSY, detail)
    if code == _SQLITE_READONLY_DBMOVED:
        return TransientStoreError(StoreCode.STORE_REPLACED, detail)
    if (reason := _SQLITE_RESOURCE.get(code & 0xFF)) is not None:
        return TransientStoreError(reason, detail)
    return PermanentStoreError(StoreCode.STORE_FAILED, detail)


@contextmanager
def translating() -> Iterator[None]:
    """Turn driver exceptions raised inside the block into :class:`StoreError` subclasses."""
    try:
        yield
    except sqlite3.Error as exc:
        raise _from_sqlite(exc) from None
    except psycopg.Error as exc:
        raise _from_psycopg(exc) from None
