"""Driver errors map to the documented store codes (docs/store-roles.md, "Store fault codes").

The SQLite cases are provoked for real in tests/hostile/test_hostile_store_sqlite.py; a full
PostgreSQL disk cannot be provoked here, so its SQLSTATE is checked with the driver's own
exception classes.
"""

from __future__ import annotations

import psycopg
import pytest

from worker.store import PermanentStoreError, StoreError, TransientStoreError
from worker.store._errors import translating


@pytest.mark.parametrize(
    ("error", "kind", "code"),
    [
        (psycopg.errors.DiskFull, TransientStoreError, "STORE_FULL"),
        (psycopg.errors.InsufficientPrivilege, PermanentStoreError, "STORE_PERMISSION_DENIED"),
        (psycopg.errors.AdminShutdown, TransientStoreError, "STORE_UNAVAILABLE"),
        (psycopg.errors.SerializationFailure, TransientStoreError, "STORE_UNAVAILABLE"),
    ],
)
def test_postgresql_sqlstates_map_to_store_codes(
    error: type[psycopg.Error], kind: type[StoreError], code: str
) -> None:
    """Disk full is transient STORE_FULL; a missing privilege is permanent, with its own code."""
    with pytest.raises(StoreError) as caught, translating():
        raise error("driver text that must not leak")
    assert type(caught.value) is kind
    assert caught.value.code == code
    assert "driver text" not in str(caught.value)
