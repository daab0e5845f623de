"""Parse ``EVALQ_STORE_URL`` into a SQLite path or a PostgreSQL conninfo.

Errors name the setting and never echo the URL itself (it may hold a password).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

__all__ = ["SETTING", "PostgresTarget", "SqliteTarget", "parse_store_url"]

SETTING = "EVALQ_STORE_URL"
_FORMS = "sqlite:///relative.db, sqlite:////absolute/path.db or postgresql://user@host/db"


@dataclass(frozen=True)
class SqliteTarget:
    """A SQLite database file (relative paths are relative to the working directory)."""

    path: Path


@dataclass(frozen=True)
class PostgresTarget:
    """A libpq connection URI, passed to psycopg unchanged."""

    conninfo: str


def _invalid(problem: str) -> ValueError:
    return ValueError(f"{SETTING} is invalid: {problem}; expected {_FORMS}")


def _sqlite(url: str) -> SqliteTarget:
    rest = url[len("sqlite:") :]
    if not rest.startswith("///"):
        raise _invalid("a sqlite URL needs three slashes before the path (no host part)")
    path = rest[3:]
    if "?" in path or "#" in path:
        raise _invalid("a sqlite URL takes no query or fragment")
    if not path or path.endswith("/"):
        raise _invalid("the sqlite URL names no database file")
    if path == ":memory:" or path.startswith("file:"):
        raise _invalid("an in-memory sqlite store would lose every record; name a file")
    return SqliteTarget(Path(path))


def _postgres(url: str) -> PostgresTarget:
    # Configuration validation, not a database call: libpq's own parser decides.
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise _invalid("libpq cannot parse the postgresql URL") from None
    return PostgresTarget(url)


def parse_store_url(url: str) -> SqliteTarget | PostgresTarget:
    """Return where the store lives, or raise ``ValueError`` naming ``EVALQ_STORE_URL``."""
    scheme = urlsplit(url.strip()).scheme.lower() if "://" in url else ""
    if scheme == "sqlite":
        return _sqlite(url.strip())
    if scheme in {"postgresql", "postgres"}:
        return _postgres(url.strip())
    if not scheme:
        raise _invalid("not a URL (no scheme://)")
    raise _invalid(f"unsupported scheme {scheme!r}")
