"""The evaluation configuration file: a TOML file with an ``[evaluation]`` and a ``[retry]`` table.

``[evaluation]`` keys are the settings of the same name (``budget_s`` is ``EVALQ_BUDGET_S``);
``[retry]`` keys are the settings prefixed ``retry_`` (``max_attempts`` is
``EVALQ_RETRY_MAX_ATTEMPTS``): the automatic retry policy and ``evalq retry``'s default reasons.

Read by :func:`worker.settings.load_settings` (``EVALQ_CONFIG=path`` or ``--config``), beneath the
environment and the flags. This module checks the file's *shape* only: a table or key it does
not know is refused naming the closest valid one (a misspelt key must not silently fall back to a
default), and a judge endpoint or key is refused outright — the file is meant to be reviewed and
versioned with the application, so secrets and deployment addresses belong to the deployment's
environment (``EVALQ_JUDGE_URL``, ``EVALQ_JUDGE_API_KEY``). Values are validated by the settings.
Problems never echo a value (it could be a key).
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["RETRY_PREFIX", "RETRY_TABLE", "TABLE", "file_location", "read_config_file"]

TABLE = "evaluation"
RETRY_TABLE = "retry"
RETRY_PREFIX = "retry_"
"""A ``[retry]`` key ``k`` is the setting ``retry_k``."""
_TABLES = (TABLE, RETRY_TABLE)
_DEPLOYMENT_WORDS = ("judge", "url", "endpoint", "key", "token", "secret", "password", "host")
"""A key containing one of these names a judge endpoint or credential (refused)."""


def _suggestion(name: str, valid: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _is_deployment(key: str) -> bool:
    return any(word in key.lower() for word in _DEPLOYMENT_WORDS)


def _deployment_problem(where: str) -> str:
    return (
        f"{where}: a judge endpoint or key does not belong in the evaluation file; it belongs to "
        "the deployment's environment (EVALQ_JUDGE, EVALQ_JUDGE_URL, EVALQ_JUDGE_MODEL, "
        "EVALQ_JUDGE_API_KEY)"
    )


def _table_of(field: str) -> tuple[str, str]:
    """(table, key) of a setting's name in the file."""
    if field.startswith(RETRY_PREFIX):
        return RETRY_TABLE, field.removeprefix(RETRY_PREFIX)
    return TABLE, field


def file_location(field: str) -> str:
    """How a problem names a setting's key in the file: ``[retry] max_attempts``."""
    table, key = _table_of(field)
    return f"[{table}] {key}"


def _table_problems(path: Path, document: dict[str, Any]) -> list[str]:
    problems = []
    for name, value in document.items():
        if name in _TABLES:
            if not isinstance(value, dict):
                problems.append(f"{path}: {name!r} must be a table ([{name}])")
            continue
        if _is_deployment(name):
            problems.append(_deployment_problem(f"{path} [{name}]"))
        else:
            problems.append(f"{path}: unknown table or key {name!r}{_suggestion(name, _TABLES)}")
    return problems


def _key_problems(path: Path, name: str, table: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    problems = []
    for key in table:
        if key in keys:
            continue
        where = f"{path} [{name}] {key}"
        if _is_deployment(key):
            problems.append(_deployment_problem(where))
        else:
            problems.append(f"{where}: unknown key{_suggestion(key, keys)}")
    return problems


def read_config_file(path: Path, keys: tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
    """The file's values of the settings named ``keys`` (``[evaluation]`` keys as they are,
    ``[retry]`` keys prefixed ``retry_``), and every problem.

    A file that cannot be read or parsed is one problem and no values.
    """
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        return {}, [f"EVALQ_CONFIG: cannot read {path} ({type(exc).__name__})"]
    except tomllib.TOMLDecodeError as exc:
        return {}, [f"EVALQ_CONFIG: {path} is not valid TOML ({exc})"]
    problems = _table_problems(path, document)
    values: dict[str, Any] = {}
    for name in _TABLES:
        table = document.get(name)
        if not isinstance(table, dict):
            continue
        known = {key: field for field in keys for t, key in [_table_of(field)] if t == name}
        problems += _key_problems(path, name, table, tuple(known))
        values.update({known[key]: value for key, value in table.items() if key in known})
    return values, problems
