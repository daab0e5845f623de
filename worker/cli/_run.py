"""``evalq run FILE``: the whole pipeline on this machine, through the real queue."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ._app import err, out
from ._common import invalid, print_rejections, say_empty, settings, store
from ._options import ConfigOpt

if TYPE_CHECKING:
    from worker.embedded import RunResult
    from worker.settings import Settings

__all__ = ["EPILOG", "run"]

EPILOG = (
    "Exit status: 0 finished (each snapshot evaluated or dead-lettered), no line rejected; "
    "1 rejected lines (the first 20 listed), nothing evaluated, not done in --timeout-s, or "
    "every judge request failed (judge down or a wrong key: fix it, then `evalq retry`)."
)
"""The ``--help`` epilog: exit statuses."""

_STATUSES = ("DECIDED", "INCONCLUSIVE", "SKIPPED", "ERROR")


def run(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    *,
    timeout_s: Annotated[
        float, typer.Option("--timeout-s", envvar="EVALQ_RUN_TIMEOUT_S", help="Give up after")
    ] = 300.0,
    spawn_worker: Annotated[
        bool,
        typer.Option(
            "--worker/--no-worker",
            envvar="EVALQ_RUN_WORKER",
            help="Start a worker process (off: use running workers)",
        ),
    ] = True,
    config_file: ConfigOpt = None,
) -> None:
    """The whole pipeline on this machine: embedded Redis (unless configured), a worker, FILE."""
    from worker.embedded import run_pipeline  # noqa: PLC0415 - fast --help

    config = settings(config=config_file)
    with store(config) as opened:  # fail fast, in one line, before starting Redis and a worker
        where = opened.location
    interruption = _Interruption.install()
    seen = _Seen()
    try:
        with _progress() as progress:
            task = progress.add_task("evaluating", total=None)

            def update(done: int, dead: int, total: int) -> None:
                interruption.check()  # a signal swallowed by a finalizer is raised here again
                seen.done, seen.dead, seen.total = done, dead, total
                progress.update(task, completed=done + dead, total=total)

            result = run_pipeline(
                file, config, spawn_worker=spawn_worker, timeout_s=timeout_s, progress=update
            )
    except _Interrupted as stop:
        _interrupted(seen, where, 128 + stop.signum)
    _print_run(result, config)
    print_rejections(result.rejected_examples, result.rejected_lines)
    if result.expected == 0 and result.rejected_lines == 0:
        say_empty(str(file), "traces", "evaluate")
    judge_failed = _say_judge_failed(result, config)
    if result.timed_out or result.evaluated == 0 or result.rejected_lines or judge_failed:
        raise typer.Exit(1)


@dataclass
class _Seen:
    """The last progress reported: evaluated, dead-lettered, expected (None: still enqueuing)."""

    done: int = 0
    dead: int = 0
    total: int | None = None


class _Interrupted(BaseException):
    """Ctrl-C or SIGTERM during a run: unwinds like KeyboardInterrupt (the pipeline stops what
    it started), then the run exits ``128 + signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class _Interruption:
    """SIGINT and SIGTERM as :class:`_Interrupted`, raised again until it is not lost.

    Why not Python's own KeyboardInterrupt: a signal's exception is raised in whatever code runs
    when it arrives, and when that is a finalizer (redis-py's ``ConnectionPool.__del__`` during a
    garbage collection, seen in about 1 of 50 Ctrl-C's under load) Python prints "Exception
    ignored" and goes on: the run then waited for its whole ``--timeout-s``. The handler records
    the signal, and :meth:`check` (called with every progress update, 5 times a second) raises
    it again.
    """

    signum: int | None = None

    @classmethod
    def install(cls) -> _Interruption:
        interruption = cls()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, interruption.handle)
        return interruption

    def handle(self, signum: int, _frame: object) -> None:
        self.signum = signum
        raise _Interrupted(signum)

    def check(self) -> None:
        """Raise the recorded signal (a no-op when none came)."""
        if self.signum is not None:
            raise _Interrupted(self.signum)


def _interrupted(seen: _Seen, where: str, code: int) -> NoReturn:
    """What was done before the interruption, where its records are, then exit ``code``."""
    total = "?" if seen.total is None else seen.total
    invalid(
        f"interrupted: {seen.done} of {total} snapshot(s) evaluated, {seen.dead} dead-lettered; "
        f"the records so far are in {where}",
        code,
    )


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out,
    )


def _print_judge(config: Settings) -> None:
    if config.judge.value == "synthetic":
        out.print(
            "[bold yellow]Judge: SYNTHETIC[/] — deterministic placeholder answers, "
            "not a model's judgment (set EVALQ_JUDGE for a real judge)"
        )
    else:
        out.print(f"Judge: {config.judge.value} ({config.judge_model or 'default model'})")
    pair = config.effective_thresholds
    note = " (uncalibrated demo values)" if config.thresholds_are_demo else ""
    out.print(
        f"Thresholds: fail <= {pair.fail_at_or_below:g}, pass >= {pair.pass_at_or_above:g}{note}"
    )


def _print_run(result: RunResult, config: Settings) -> None:
    _print_judge(config)
    out.print(f"Metric set: {result.metric_set_version}")
    out.print(_run_table(result))
    out.print(
        f"snapshots: {result.expected}  evaluated: {result.evaluated}  "
        f"dead letters: {result.dead_lettered}  rejected lines: {result.rejected_lines}"
    )
    _say_reused(result)
    out.print(f"Store: {result.store_location}", soft_wrap=True)
    if result.timed_out and result.worker_log is None:  # --no-worker: nothing of ours consumed
        err.print(
            "[red]not finished in time[/red]: with --no-worker the snapshots wait for a running "
            "worker; start `evalq worker` on this broker and store, or drop --no-worker",
            highlight=False,
            soft_wrap=True,
        )
    elif result.timed_out:
        err.print(f"[red]not finished in time[/red]; worker log: {result.worker_log}")


def _say_reused(result: RunResult) -> None:
    """Results recorded before this run are shown as they are: say so (skip-if-done)."""
    if not result.reused:
        return
    out.print(
        f"reused: {result.reused} of {result.expected} snapshot(s) were already evaluated under "
        f"{result.metric_set_version} before this run; their recorded results are shown "
        "(`evalq retry` re-evaluates those that failed)",
        highlight=False,
        soft_wrap=True,
    )


def _say_judge_failed(result: RunResult, config: Settings) -> bool:
    """True (and a hint on stderr) when no evaluation that asked the judge got an answer."""
    if not result.judge_all_failed:
        return False
    err.print(
        f"[red]every judge request failed[/red]: {result.judged} evaluation(s) asked the judge "
        "and none got an answer (BACKEND_ERROR / TIMEOUT) — the judge is down or refuses the "
        f"key (e.g. HTTP 401) of EVALQ_JUDGE={config.judge.value}; check EVALQ_JUDGE_URL and "
        "EVALQ_JUDGE_API_KEY, then run `evalq retry` to re-evaluate them",
        highlight=False,
        soft_wrap=True,
    )
    return True


def _run_table(result: RunResult) -> Table:
    table = Table("metric", "passed", "DECIDED", "INCONCLUSIVE", "SKIPPED", "ERROR")
    for metric_id, counts in result.by_metric.items():
        table.add_row(
            metric_id,
            str(result.passed.get(metric_id, 0)),
            *(str(counts.get(status, 0)) for status in _STATUSES),
        )
    return table
