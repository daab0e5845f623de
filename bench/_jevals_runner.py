"""The jevals baseline of ``bench/lanes.py``: jevals' in-process dataset runner over traces.

Runs in its own virtualenv (``bench/.venv-jevals``, ``jevals==0.1.4``; never imports evalq):
``python bench/_jevals_runner.py --url URL --concurrency C --traces FILE``. It evaluates every
line of FILE (OpenAI chat traces: ``messages`` and ``tools``) with jevals' four agent evals of
its README (tool choice, used tool result, grounded, stayed in scope: one request per trace) through
``aevaluate_dataset`` and its System One backend pointed at ``URL`` (the synthetic stand-in
server), and prints one JSON line: the completion rate between the 10th and 90th percentile of
completion times (the same steady-state window as evalq's figures), requests per trace, errors.
The API key is read from ``JEVALS_BENCH_KEY`` (never printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from jevals import aevaluate_dataset
from jevals.agent import Grounded, StayedInScope, ToolChoice, UsedToolResult
from jevals.backends.typesafe import TypeSafeBackend

__all__ = ["main"]

KEY_ENV = "JEVALS_BENCH_KEY"


def _middle_rate(times: Sequence[float]) -> float:
    """Completions per second between the 10th and 90th percentile (as bench._kit.middle_rate)."""
    ordered = sorted(times)
    first, last = round(0.1 * (len(ordered) - 1)), round(0.9 * (len(ordered) - 1))
    span = ordered[last] - ordered[first]
    return (last - first) / span if last > first and span > 0 else float("nan")


async def _run(url: str, concurrency: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    backend = TypeSafeBackend(api_key=os.environ[KEY_ENV], base_url=url, name="systemone")
    # jevals' README agent set: it packs the example trace into one request, as evalq's does
    evals = [ToolChoice(), UsedToolResult(), Grounded(), StayedInScope()]
    done_at: list[float] = []
    report = await aevaluate_dataset(
        rows,
        evals,
        backend=backend,
        concurrency=concurrency,
        on_result=lambda _i, _report: done_at.append(time.monotonic()),
    )
    errors = sum(1 for rep in report.reports for r in rep.results if r.error)
    first_error = next((r.error for rep in report.reports for r in rep.results if r.error), None)
    return {
        "rate_per_s": _middle_rate(done_at),
        "traces": report.n,
        "requests_per_trace": report.usage.requests / max(1, report.n),
        "errors": errors,
        # the error's class name only: its text may quote a reply
        "first_error": None if first_error is None else first_error.split(":", 1)[0],
        "wall_s": report.wall_ms / 1000,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: one JSON line on stdout."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--traces", required=True)
    args = parser.parse_args(argv)
    with open(args.traces, encoding="utf-8") as handle:  # noqa: PTH123 - stdlib only here
        rows = [json.loads(line) for line in handle if line.strip()]
    result = asyncio.run(_run(args.url, args.concurrency, rows))
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
