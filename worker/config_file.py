"""The evaluation configuration file: a TOML file with one ``[evaluation]`` table.

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

__all__ = ["TABLE", "read_config_file"]

TABLE = "evaluation"
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


def _table_problems(path: Path, document: dict[str, Any]) -> list[str]:
    problems = []
    for name in document:
        if name == TABLE:
            continue
        if _is_deployment(name):
            problems.append(_deployment_problem(f"{path} [{name}]"))
        else:
            problems.append(f"{path}: unknown table or key {name!r}{_suggestion(name, [TABLE])}")
    if TABLE in document and not isinstance(document[TABLE], dict):
        problems.append(f"{path}: {TABLE!r} must be a table ([{TABLE}])")
    return problems


def _key_problems(path: Path, table: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    problems = []
    for key in table:
        if key in keys:
            continue
        where = f"{path} [{TABLE}] {key}"
        if _is_deployment(key):
            problems.append(_deployment_problem(where))
        else:
            problems.append(f"{where}: unknown key{_suggestion(key, keys)}")
    return problems


def read_config_file(path: Path, keys: tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
    """The ``[evaluation]`` values of ``path`` whose key is one of ``keys``, and every problem.

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
    table = document.get(TABLE)
    if not isinstance(table, dict):
        return {}, problems
    problems += _key_problems(path, table, keys)
    return {key: value for key, value in table.items() if key in keys}, problems
