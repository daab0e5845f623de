"""What every command shares: settings, the store, the broker, and one-line failures.

Every failure a user can cause or meet is one line on stderr and an exit status (2: invalid
configuration or options, 1: a broker that is unreachable or failed a send, named by its
:class:`~producer.BrokerFailure` code), never a traceback. Heavy modules (Celery,
kombu, the store drivers) are imported when a command runs, so ``evalq --help`` stays fast.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from ._app import err

if TYPE_CHECKING:
    from producer import BrokerError, Producer, RejectedLine
    from worker.settings import ConfigError, Settings
    from worker.store import Store

__all__ = [
    "SHOWN_REJECTIONS",
    "broker_down",
    "connected",
    "invalid",
    "invalid_config",
    "loads_strict",
    "print_rejections",
    "require_broker",
    "say_empty",
    "settings",
    "store",
]

SHOWN_REJECTIONS = 20
"""Rejected lines listed by a command; the rest are counted ("… and N more")."""


def invalid_config(exc: ConfigError) -> NoReturn:
    """``invalid configuration: …`` (one line, however long), exit status 2."""
    err.print(
        f"[red]invalid configuration:[/red] {exc}", markup=True, highlight=False, soft_wrap=True
    )
    raise typer.Exit(2) from None


def invalid(message: str, code: int = 2) -> NoReturn:
    """``message`` on stderr as plain text (no markup), then exit status ``code``."""
    err.print(message, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code) from None


def settings(**overrides: str | int | Path | None) -> Settings:
    """The process's settings from ``EVALQ_*`` plus the flags given (None: not given)."""
    from worker.settings import ConfigError, load_settings  # noqa: PLC0415 - fast --help

    try:
        return load_settings(**overrides)
    except ConfigError as exc:
        invalid_config(exc)


def require_broker(config: Settings) -> str:
    """The configured broker URL, or the message naming ``EVALQ_BROKER_URL`` and exit 2."""
    from worker.settings import ConfigError  # noqa: PLC0415 - fast --help

    try:
        return config.require_broker()
    except ConfigError as exc:
        invalid_config(exc)


def _require_existing(url: str) -> None:
    """Refuse a SQLite store file that is not there (opening it would create an empty one).

    Only where it could be created: a path no file can have fails to open, as any store does.
    """
    from worker.store import STORE_URL_SETTING, store_location  # noqa: PLC0415 - fast --help

    if not url.startswith("sqlite:"):
        return  # a PostgreSQL database that does not exist fails to connect, naming itself
    where = Path(store_location(url))
    if where.parent.is_dir() and not where.exists():
        invalid(
            f"{STORE_URL_SETTING}: {where} does not exist (NO_STORE); point {STORE_URL_SETTING} "
            "at the workers' store (sqlite:////absolute/path.db or postgresql://…), or create it "
            "with `evalq store migrate`"
        )


@contextmanager
def store(config: Settings, *, migrate: bool = True, existing: bool = False) -> Iterator[Store]:
    """The open store; on any store failure one line ``EVALQ_STORE_URL: … (CODE)``, exit 2.

    The store is reached once, without retries, when it opens (``Store.probe``): an unreachable
    one fails within its connect timeout instead of ending in a traceback. ``existing``: a
    reader's store, so a SQLite file that is not there is refused instead of created.
    """
    from worker.store import StoreError, failure_line, open_store  # noqa: PLC0415 - fast --help

    if existing:
        _require_existing(config.store_url)
    try:
        with open_store(config.store_url, migrate=migrate) as opened:
            yield opened
    except StoreError as exc:
        invalid(failure_line(config.store_url, exc.code))


def print_rejections(examples: Iterable[RejectedLine], total: int) -> None:
    """The first :data:`SHOWN_REJECTIONS` rejected lines (file:line: field: CODE), then a count."""
    for rejected in list(examples)[:SHOWN_REJECTIONS]:
        err.print(f"  {rejected}", highlight=False, markup=False, soft_wrap=True)
    if total > SHOWN_REJECTIONS:
        err.print(f"  … and {total - SHOWN_REJECTIONS} more rejected lines", highlight=False)


def say_empty(source: str, what: str, action: str) -> None:
    """An input that held nothing: ``no traces in FILE: nothing to enqueue`` on stderr."""
    # soft_wrap: a long path must stay one piece (Rich would break it at the terminal width).
    err.print(
        f"no {what} in {source}: nothing to {action}", highlight=False, markup=False, soft_wrap=True
    )


def broker_down(exc: BrokerError, hint: str | None = None) -> NoReturn:
    """One line with the failure's code (no traceback, no URL: it may hold a password), then
    exit status 1."""
    hint = f"; {hint}" if hint else ""
    what = "unreachable" if exc.code == "BROKER_UNREACHABLE" else "failed"
    err.print(
        f"[red]broker {what}[/red] (EVALQ_BROKER_URL): {exc.code}{hint}",
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(1) from None


@contextmanager
def connected(config: Settings, url: str, hint: str | None = None) -> Iterator[Producer]:
    """A producer whose broker answered one connection attempt; a dead broker, or a send the
    broker failed, is one line."""
    from producer import BrokerError  # noqa: PLC0415 - fast --help
    from worker.producing import producer_for  # noqa: PLC0415

    producer = producer_for(config, url)
    try:
        try:
            producer.check_broker()
        except BrokerError as exc:
            broker_down(exc, hint)
        try:
            yield producer
        except BrokerError as exc:  # the broker went away or refused while sending
            broker_down(exc, hint)
    finally:
        producer.close()


def _no_constant(name: str) -> None:
    raise ValueError(f"non-finite number {name}")


def loads_strict(text: str) -> object:
    """JSON text to a value; ``NaN``/``Infinity`` are refused (``ValueError``) like bad JSON."""
    return json.loads(text, parse_constant=_no_constant)
