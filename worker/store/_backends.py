"""Connections and transactions for SQLite and PostgreSQL behind one tiny ``Tx`` protocol.

SQL is written once with ``:name`` placeholders (sqlite3's named style) and converted for
psycopg. Both backends connect lazily and notice a fork: a child never touches its parent's
connections (closing them would end the parent's sessions), it opens its own.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Protocol

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from ._errors import PermanentStoreError, StoreCode, TransientStoreError
from ._turns import Turn, WriterTurns

__all__ = [
    "SQLITE_BULK_ROWS",
    "Backend",
    "Dialect",
    "Params",
    "PostgresBackend",
    "SqliteBackend",
    "Tx",
    "redacted",
]

Dialect = Literal["sqlite", "postgresql"]
Params = Mapping[str, object]
Row = tuple[Any, ...]
SQLITE_BULK_ROWS = 16
"""Evaluations per SQLite transaction of a batch write: the write lock is held ~5-15 ms, not the
~30-50 ms of 64 (docs/concurrency.md, "Live-lane latency")."""
SQLITE_BULK_ROWS_BESIDE_URGENT = 4
"""The same while urgent writers (the live lane) write beside the batch (``worker.store._turns``):
a live record then waits behind at most 4 evaluations' transaction."""


class Tx(Protocol):
    """One open transaction. Statements use ``:name`` placeholders."""

    def rows(self, sql: str, params: Params | None = None) -> list[Row]:
        """Run a query and return every row."""
        ...

    def run(self, sql: str, params: Params | None = None) -> int:
        """Run a statement and return the number of rows it wrote."""
        ...

    def run_many(self, sql: str, params: Sequence[Params]) -> None:
        """Run one statement for each parameter set."""
        ...

    def insert_rows(self, sql: str, rows: Sequence[Params]) -> None:
        """Run a one-row ``INSERT ... VALUES (...)`` template for every row, in as few calls."""
        ...

    def lock(self, *keys: str) -> None:
        """Serialize with every other transaction that locks any of ``keys``, until this one
        ends; taken in the order given (callers give one global order: no deadlock)."""
        ...


class Backend(Protocol):
    """Where records live: hands out transactions, retried by the caller as a whole."""

    dialect: Dialect

    def bulk_rows(self, *, urgent: bool) -> int | None:
        """Evaluations per transaction of the next part of a batch write (``urgent``: of live
        records); ``None``: the whole batch in one."""
        ...

    @property
    def location(self) -> str:
        """The database file, or the PostgreSQL URL without its password."""
        ...

    def probe(self) -> None:
        """Reach the database once, without retries: raises (driver errors) within seconds."""
        ...

    def transaction(self, *, write: bool, turn: Turn = Turn.URGENT) -> AbstractContextManager[Tx]:
        """A transaction that commits when the block ends normally and rolls back otherwise.

        ``turn`` says how a write takes its turn among the writers (:class:`Turn`: a batch may
        wait for single-record writers to go first).
        """
        ...

    def close(self) -> None:
        """Close this process's connections; later use raises ``STORE_CLOSED``."""
        ...


# --- SQLite ----------------------------------------------------------------------------------


def _sqlite_value(value: object) -> object:
    # sqlite3's datetime adapter is deprecated; fixed-width UTC ISO text also sorts correctly.
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    return value


def _sqlite_params(params: Params | None) -> dict[str, object]:
    return {k: _sqlite_value(v) for k, v in (params or {}).items()}


_SQLITE_MAX_PARAMS = 30_000  # SQLite allows 32766 per statement (since 3.32)
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")  # a ``:name`` placeholder (both dialects)


def _insert_parts(sql: str) -> tuple[str, str, str]:
    """(head, the ``VALUES`` tuple, tail) of a one-row ``INSERT ... VALUES (...)`` template."""
    head, _, rest = sql.partition("VALUES")
    end = rest.index(")") + 1  # value tuples of the store's templates hold no parentheses
    return head, rest[:end], rest[end:]


@lru_cache(maxsize=64)
def _positional(sql: str, count: int) -> tuple[str, tuple[str, ...]]:
    """A one-row ``INSERT ... VALUES (:a, :b)`` for ``count`` rows of ``?``, and the names."""
    head, values, tail = _insert_parts(sql)
    if _NAMED.search(head + tail):
        raise ValueError("insert_rows needs every parameter inside the VALUES tuple")
    one = _NAMED.sub("?", values)
    return f"{head}VALUES {', '.join([one] * count)}{tail}", tuple(_NAMED.findall(values))


class _SqliteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def rows(self, sql: str, params: Params | None = None) -> list[Row]:
        return self._conn.execute(sql, _sqlite_params(params)).fetchall()

    def run(self, sql: str, params: Params | None = None) -> int:
        return self._conn.execute(sql, _sqlite_params(params)).rowcount

    def run_many(self, sql: str, params: Sequence[Params]) -> None:
        self._conn.executemany(sql, [_sqlite_params(p) for p in params])

    def insert_rows(self, sql: str, rows: Sequence[Params]) -> None:
        # One multi-row statement with positional parameters: executemany releases and re-takes
        # the GIL for every row, and in a busy worker each re-take can wait a whole switch
        # interval, so a batch's writes held the write lock ~70% of the time (measured); named
        # parameters are looked up linearly by SQLite's parser (quadratic in the row count).
        if not rows:
            return
        _, names = _positional(sql, 1)
        per = max(1, _SQLITE_MAX_PARAMS // max(1, len(names)))
        for start in range(0, len(rows), per):
            chunk = rows[start : start + per]
            text, _ = _positional(sql, len(chunk))
            # datetime is the only type that needs adapting; an exact-type test inline instead of
            # an isinstance call per value (alternating writes: 1-22% less of the thread's CPU).
            values = [
                _sqlite_value(v) if type(v) is datetime else v
                for row in chunk
                for v in map(row.__getitem__, names)
            ]
            self._conn.execute(text, values)

    def lock(self, *keys: str) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` already holds the database's one write lock."""


_SQLITE_PRAGMAS = (
    "PRAGMA foreign_keys = ON",
    # FULL: a commit survives power loss before the broker message is acked.
    "PRAGMA synchronous = FULL",
    # REPLACE deletes conflicting rows; with this on, those deletes hit the append-only triggers.
    "PRAGMA recursive_triggers = ON",
)


def _file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path`` now, or None if there is none."""
    try:
        found = path.stat()
    except OSError:  # deleted, or its directory is gone
        return None
    return (found.st_dev, found.st_ino)


class SqliteBackend:
    """One connection per thread (WAL lets readers run beside the single writer).

    Every transaction first checks, and every write re-checks just before ``COMMIT``, that the
    file at the path is still the one this process opened (device and inode). A database file
    deleted or replaced under a running worker would otherwise keep taking commits into the
    unlinked inode, and their messages would be acked (measured: 0 of 1,000 records visible
    after a restart). SQLite's own check (``SQLITE_READONLY_DBMOVED``) only runs when a rollback
    journal opens, never in WAL mode. Once detected, every transaction of this backend raises
    ``TransientStoreError(StoreCode.STORE_REPLACED)`` (messages stay unacked) until the process is
    restarted and opens, and migrates, whatever file is there now.
    """

    dialect: Dialect = "sqlite"

    def __init__(self, path: Path, *, busy_timeout_s: float) -> None:
        self._path = path.resolve()
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # unwritable or not a directory: nothing can be recorded there
            raise TransientStoreError(StoreCode.STORE_UNAVAILABLE, type(exc).__name__) from None
        self._busy_timeout_s = busy_timeout_s
        self._turns = WriterTurns(self._path, timeout_s=busy_timeout_s)
        self._closed = False
        self._identity: tuple[int, int] | None = None  # of the file the first connection opened
        self._replaced = False
        self._reset()

    def _reset(self) -> None:
        self._guard = threading.Lock()
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._pid = os.getpid()

    @property
    def location(self) -> str:
        """Absolute path of the database file."""
        return str(self._path)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._path,
            timeout=self._busy_timeout_s,
            isolation_level=None,  # we issue BEGIN/COMMIT ourselves
            check_same_thread=False,  # close() may run on another thread
        )
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            for pragma in _SQLITE_PRAGMAS:
                conn.execute(pragma)
        except sqlite3.Error:
            conn.close()  # a busy file: the caller's retry opens a new connection
            raise
        if mode is None or str(mode[0]).lower() != "wal":
            conn.close()
            raise PermanentStoreError(StoreCode.WAL_UNAVAILABLE, "the file system refused WAL mode")
        identity = _file_identity(self._path)
        if self._identity is None:
            self._identity = identity
        if identity is None or identity != self._identity:
            conn.close()  # a later connection found another file at the path
            self._replaced = True
            raise _replaced_error()
        return conn

    def probe(self) -> None:
        """Open (or create) the file and read its catalogue once."""
        self._connection().execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()

    def _check_file(self) -> None:
        """Raise ``STORE_REPLACED`` unless the file at the path is the one first opened."""
        if self._replaced or _file_identity(self._path) != self._identity:
            self._replaced = True
            raise _replaced_error()

    def _connection(self) -> sqlite3.Connection:
        if self._pid != os.getpid():
            self._reset()  # forget (never close) the parent's connections
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        with self._guard:
            if self._closed:
                raise PermanentStoreError(StoreCode.STORE_CLOSED)
            conn = self._connect()
            self._connections.append(conn)
        self._local.conn = conn
        return conn

    def bulk_rows(self, *, urgent: bool) -> int | None:
        """:data:`SQLITE_BULK_ROWS`; for a batch (not ``urgent``) written while urgent writers
        are active, :data:`SQLITE_BULK_ROWS_BESIDE_URGENT`."""
        if not urgent and self._turns.urgent_recently():
            return SQLITE_BULK_ROWS_BESIDE_URGENT
        return SQLITE_BULK_ROWS

    @contextmanager
    def transaction(self, *, write: bool, turn: Turn = Turn.URGENT) -> Iterator[Tx]:
        """``BEGIN IMMEDIATE`` in a writer turn for writes (``worker.store._turns``), deferred
        ``BEGIN`` for reads; each waits up to the busy timeout."""
        if not write:
            with self._transaction(write=False) as tx:
                yield tx
            return
        with self._turns.turn(turn), self._transaction(write=True) as tx:
            yield tx

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Tx]:
        conn = self._connection()
        self._check_file()
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield _SqliteTx(conn)
            if write:
                self._check_file()  # as late as possible: only a replacement within µs goes unseen
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        """Close every connection this process opened."""
        with self._guard:
            self._closed = True
            connections, self._connections = self._connections, []
        if self._pid == os.getpid():
            for conn in connections:
                conn.close()
        self._local = threading.local()
        self._turns.close()


def _replaced_error() -> TransientStoreError:
    return TransientStoreError(
        StoreCode.STORE_REPLACED, "the database file was deleted or replaced"
    )


# --- PostgreSQL ------------------------------------------------------------------------------

_POOL_WAIT_S = 10.0


@lru_cache(maxsize=256)
def _pg_sql(sql: str) -> str:
    if "%" in sql:
        raise ValueError("store SQL must not contain '%' (psycopg placeholder syntax)")
    return _NAMED.sub(r"%(\1)s", sql)


_PLACEHOLDERS = re.compile(r"\(\s*:\w+(?:\s*,\s*:\w+)*\s*\)")


@lru_cache(maxsize=64)
def _copy_of(sql: str) -> tuple[str, tuple[str, ...]] | None:
    """``COPY table (columns) FROM STDIN`` and the row's names for a plain one-row ``INSERT``.

    A plain ``INSERT`` of rows fires the same triggers and checks the same constraints as
    ``COPY``, which the server runs as one statement instead of one per row: with the metric
    results and pending outcomes copied, a batch write costs 28% less CPU per evaluation
    (client and server, ``bench/store_writes.py``: 364-368 against 496-513 µs). Templates with
    anything after the tuple (insert-if-absent: ``ON CONFLICT``) or with values that are not
    plain placeholders return None.
    """
    head, values, tail = _insert_parts(sql)
    if tail.strip() or not _PLACEHOLDERS.fullmatch(values.strip()):
        return None
    target = head.strip().removeprefix("INSERT INTO").strip()
    return f"COPY {target} FROM STDIN", tuple(_NAMED.findall(values))


_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"


class _PostgresTx:
    def __init__(self, conn: psycopg.Connection[Row]) -> None:
        self._conn = conn

    def _execute(self, sql: str, params: Params | None) -> psycopg.Cursor[Row]:
        if params is None:
            return self._conn.execute(sql)
        return self._conn.execute(_pg_sql(sql), params)

    def rows(self, sql: str, params: Params | None = None) -> list[Row]:
        return self._execute(sql, params).fetchall()

    def run(self, sql: str, params: Params | None = None) -> int:
        return self._execute(sql, params).rowcount

    def run_many(self, sql: str, params: Sequence[Params]) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(_pg_sql(sql), params)

    def insert_rows(self, sql: str, rows: Sequence[Params]) -> None:
        if not rows:
            return
        copy = _copy_of(sql)
        if copy is None:  # insert-if-absent: executemany pipelines the rows in one round trip
            self.run_many(sql, rows)
            return
        statement, names = copy
        with self._conn.cursor() as cur, cur.copy(statement) as stream:
            for row in rows:
                stream.write_row([row[name] for name in names])

    def lock(self, *keys: str) -> None:
        # One pipeline: the server takes them one after another, in order, in one round trip
        # (a batch of 64 traces took 64 round trips).
        self.run_many(_LOCK, [{"key": key} for key in keys])


def redacted(conninfo: str) -> str:
    """``postgresql://user@host:port/db`` with no password or other parameters."""
    parts = conninfo_to_dict(conninfo)
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{parts.get('host', '')}{port}/{parts.get('dbname', '')}"


class PostgresBackend:
    """A small psycopg pool per process, opened on first use (never at import or in a parent)."""

    dialect: Dialect = "postgresql"

    def bulk_rows(self, *, urgent: bool) -> int | None:
        """The whole batch in one transaction: PostgreSQL has no single write lock to keep
        short."""
        del urgent
        return None

    def __init__(
        self, conninfo: str, *, pool_max_size: int, connect_timeout_s: float, lock_timeout_s: float
    ) -> None:
        self._conninfo = conninfo
        self._location = redacted(conninfo)
        self._pool_max_size = pool_max_size
        self._connect_timeout_s = connect_timeout_s
        self._lock_timeout_ms = round(lock_timeout_s * 1000)
        self._closed = False
        self._reset()

    def _reset(self) -> None:
        self._guard = threading.Lock()
        self._pool: ConnectionPool[psycopg.Connection[Row]] | None = None
        self._pid = os.getpid()

    @property
    def location(self) -> str:
        """The URL without password or options."""
        return self._location

    def _configure(self, conn: psycopg.Connection[Row]) -> None:
        # A hung client must not hold a trace lock forever; waiting writers give up and retry.
        conn.execute(
            "SELECT set_config('lock_timeout', %s, false),"
            " set_config('idle_in_transaction_session_timeout', %s, false)",
            (f"{self._lock_timeout_ms}ms", f"{max(self._lock_timeout_ms * 6, 60_000)}ms"),
        )

    def _connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in conninfo_to_dict(self._conninfo):  # the URL's own wins
            kwargs["connect_timeout"] = max(2, round(self._connect_timeout_s))  # libpq: >= 2 s
        return kwargs

    def probe(self) -> None:
        """One direct connection, no pool and no retries: a refused port fails at once, an
        unanswered one within the connect timeout (the pool would keep retrying until its own
        timeout, and the store's retries on top made an unreachable server cost ~31 s)."""
        with psycopg.connect(self._conninfo, **self._connect_kwargs()):
            pass

    def _new_pool(self) -> ConnectionPool[psycopg.Connection[Row]]:
        pool: ConnectionPool[psycopg.Connection[Row]] = ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=self._pool_max_size,
            kwargs=self._connect_kwargs(),
            configure=self._configure,
            # Waiting for a free pooled connection under load is not connecting: keep it long.
            timeout=max(self._connect_timeout_s, _POOL_WAIT_S),
            name="evalq-store",
            open=False,
        )
        pool.open(wait=False)
        return pool

    def _current_pool(self) -> ConnectionPool[psycopg.Connection[Row]]:
        if self._pid != os.getpid():
            self._reset()  # the parent's pool and its threads are not ours
        with self._guard:
            if self._closed:
                raise PermanentStoreError(StoreCode.STORE_CLOSED)
            if self._pool is None:
                self._pool = self._new_pool()
            return self._pool

    @contextmanager
    def transaction(self, *, write: bool, turn: Turn = Turn.URGENT) -> Iterator[Tx]:
        """``BEGIN [READ ONLY]`` … ``COMMIT`` on a pooled connection (READ COMMITTED).

        ``turn`` changes nothing here: PostgreSQL has no single write lock to take turns at.
        """
        del turn
        with self._current_pool().connection() as conn:
            conn.read_only = not write
            with conn.transaction():
                yield _PostgresTx(conn)

    def close(self) -> None:
        """Close this process's pool (a forked child leaves its parent's pool alone)."""
        with self._guard:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.close(timeout=5.0)
