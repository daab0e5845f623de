"""Bench instrumentation: how many store calls a worker process made, and for how many items.

Imported by the bench apps of ``bench/execution_models.py`` (``--count-store``): when
``BENCH_COUNT_FILE`` is set, ``Store.record_evaluations`` (one write transaction group) and
``Store.existing_evaluations`` (one skip-if-done query) are counted, and the counts are appended
to that file as one JSON line when the process exits. Not part of the worker.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worker.store import Store

__all__ = ["install"]

_counts = {"writes": 0, "written": 0, "queries": 0, "queried": 0}
_lock = threading.Lock()


def _counted(method: Callable[..., Any], calls: str, items: str) -> Callable[..., Any]:
    def wrapper(self: Store, batch: Any, *args: Any, **kwargs: Any) -> Any:
        with _lock:
            _counts[calls] += 1
            _counts[items] += len(batch)
        return method(self, batch, *args, **kwargs)

    return wrapper


def _dump(path: str) -> None:
    with Path(path).open("a", encoding="utf-8") as out:
        out.write(json.dumps({"pid": os.getpid(), **_counts}) + "\n")


def install() -> None:
    """Count this process's store calls if ``BENCH_COUNT_FILE`` names a file."""
    path = os.environ.get("BENCH_COUNT_FILE")
    if not path:
        return
    Store.record_evaluations = _counted(Store.record_evaluations, "writes", "written")  # type: ignore[method-assign]
    Store.existing_evaluations = _counted(Store.existing_evaluations, "queries", "queried")  # type: ignore[method-assign]
    atexit.register(_dump, path)
