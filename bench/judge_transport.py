"""Judge transport throughput: achieved vs ideal requests/s at 16, 64 and 256 requests in flight.

Starts the synthetic judge server (``python -m worker.judges.testing``) as a separate process with
a fixed latency, so server CPU does not compete with the client for this process's GIL, then keeps
N requests in flight (closed loop) per transport and counts replies in a fixed window.

Ideal = in_flight / latency. The default transport must reach >= 0.85 of ideal at 64 in flight.

Run: ``.venv/bin/python bench/judge_transport.py [--latency-ms 100] [--window-s 2]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from worker.judges import ChoiceQuestion, JudgeRequest, NoulQuestion, SystemOneJudge
from worker.judges._transport import default_client

LEVELS = (16, 64, 256)
TARGET_RATIO = 0.85
TARGET_LEVEL = 64
DRAIN_S = 5.0
_LISTENING = re.compile(rb"listening on (http://\S+)")

REQUEST = JudgeRequest(
    state={"request": "Where is order 42?", "final_answer": "It ships tomorrow."},
    questions={
        "grounded.c0": NoulQuestion(instructions="Is the claim supported by the tool results?"),
        "answer_relevancy.relevance": NoulQuestion(instructions="Does it answer the request?"),
        "tool_choice.q": ChoiceQuestion(
            instructions="Was the right tool chosen?", criteria={"correct": None, "wrong": None}
        ),
    },
)
BODY = json.dumps({**REQUEST.wire(), "model": "jev-latest"}).encode()
HEADERS = {"Authorization": "Bearer bench", "Content-Type": "application/json"}


@dataclass(frozen=True)
class Row:
    """One measurement."""

    transport: str
    in_flight: int
    achieved: float
    ideal: float
    errors: int

    @property
    def ratio(self) -> float:
        """achieved / ideal."""
        return self.achieved / self.ideal


class Server:
    """The synthetic judge server in its own process."""

    def __init__(self, latency_ms: float) -> None:
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "worker.judges.testing",
                "--port",
                "0",
                "--latency-ms",
                f"{latency_ms}",
            ],
            stdout=subprocess.PIPE,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()  # blocks until the server prints its address
        match = _LISTENING.search(line)
        if match is None:
            self.close()
            raise RuntimeError("judge server did not start")
        self.base_url = match.group(1).decode()

    def close(self) -> None:
        """Stop the server process."""
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)


async def measure(
    send: Callable[[], Awaitable[object]],
    in_flight: int,
    *,
    spread_s: float,
    warmup_s: float,
    window_s: float,
) -> tuple[float, int]:
    """Replies per second inside the window (after a warm-up), and the number of errors.

    The loops start spread over ``spread_s`` (one server latency): started all at once they
    would stay in lock-step bursts forever (fixed latency), which no real worker produces.
    """
    counting, running = False, True
    done = errors = 0

    async def loop(delay_s: float) -> None:
        nonlocal done, errors
        await asyncio.sleep(delay_s)
        while running:
            try:
                await send()
            except Exception:
                errors += 1
                continue
            done += counting

    tasks = [asyncio.create_task(loop(spread_s * i / in_flight)) for i in range(in_flight)]
    await asyncio.sleep(spread_s + warmup_s)
    counting, start = True, time.monotonic()
    await asyncio.sleep(window_s)
    counting, elapsed = False, time.monotonic() - start
    running = False  # drain: let in-flight requests finish so the next cell starts clean
    _, pending = await asyncio.wait(tasks, timeout=DRAIN_S)
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return done / elapsed, errors


def raw_sender(client: httpx.AsyncClient, url: str) -> Callable[[], Awaitable[object]]:
    """POST the System One body and read the reply (transport cost only)."""

    async def send() -> object:
        response = await client.post(url, content=BODY, headers=HEADERS, timeout=30.0)
        response.raise_for_status()
        return response.content

    return send


async def run(base_url: str, latency_s: float, warmup_s: float, window_s: float) -> list[Row]:
    """Measure every transport at every level."""
    url = base_url + "/v1/systemone"
    httpx_default = httpx.AsyncClient()
    httpx_big = httpx.AsyncClient(limits=httpx.Limits(max_connections=1024))
    evalq_default = default_client()
    judge = SystemOneJudge(base_url, api_key="bench")
    transports: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("httpx default pool", raw_sender(httpx_default, url)),
        ("httpx pool of 1024", raw_sender(httpx_big, url)),
        ("evalq default (aiohttp)", raw_sender(evalq_default, url)),
        ("SystemOneJudge (default)", lambda: judge(REQUEST)),
    ]
    rows = []
    try:
        for name, send in transports:
            for level in LEVELS:
                achieved, errors = await measure(
                    send, level, spread_s=latency_s, warmup_s=warmup_s, window_s=window_s
                )
                rows.append(Row(name, level, achieved, level / latency_s, errors))
    finally:
        await httpx_default.aclose()
        await httpx_big.aclose()
        await evalq_default.aclose()
        await judge.aclose()
    return rows


def table(rows: list[Row]) -> str:
    """A fixed-width table, one row per transport and level."""
    lines = [
        f"{'transport':<26} {'in flight':>9} {'achieved/s':>11} {'ideal/s':>9} "
        f"{'ratio':>6} {'errors':>6}"
    ]
    for r in rows:
        lines.append(
            f"{r.transport:<26} {r.in_flight:>9} {r.achieved:>11.1f} {r.ideal:>9.1f} "
            f"{r.ratio:>6.2f} {r.errors:>6}"
        )
    return "\n".join(lines)


def verdict(rows: list[Row]) -> tuple[bool, str]:
    """Whether the default transport meets the target at 64 in flight."""
    (row,) = [
        r for r in rows if r.transport.startswith("evalq default") and r.in_flight == TARGET_LEVEL
    ]
    ok = row.ratio >= TARGET_RATIO
    word = "MEETS" if ok else "MISSES"
    where = f"default transport at {TARGET_LEVEL} in flight"
    return ok, f"{where}: {row.ratio:.2f} of ideal — {word} >= {TARGET_RATIO}"


def main() -> int:
    """Start the server, measure, print the table and the verdict."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--warmup-s", type=float, default=0.5)
    parser.add_argument("--window-s", type=float, default=2.0)
    args = parser.parse_args()
    server = Server(args.latency_ms)
    try:
        rows = asyncio.run(
            run(server.base_url, args.latency_ms / 1000, args.warmup_s, args.window_s)
        )
    finally:
        server.close()
    load_1m = os.getloadavg()[0]  # other work on the machine skews every ratio: say so
    print(
        f"server latency {args.latency_ms:.0f} ms, window {args.window_s:.1f} s per cell, "
        f"{os.cpu_count()} CPUs, load average {load_1m:.2f} at the end"
    )
    print(table(rows))
    ok, line = verdict(rows)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
