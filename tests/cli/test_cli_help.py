"""``evalq --help`` as a newcomer reads it: every flag's environment twin, whole, at 80 columns."""

from __future__ import annotations

import re
from importlib.metadata import version
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from worker.cli import app

_ROOT: Any = typer.main.get_command(app)  # typer's own (vendored) click types
_COMMANDS: dict[str, Any] = {"": _ROOT, **_ROOT.commands}
_COMMANDS["store migrate"] = _ROOT.commands["store"].commands["migrate"]
_TWIN = re.compile(r"\\\[env var: (EVALQ_[A-Z0-9_]+)\]")


def _help(*argv: str) -> str:
    result = CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output


def _twin(option: Any) -> str | None:
    """The variable a flag reads: Typer's own ``envvar``, or the setting named in its help."""
    if isinstance(option.envvar, str):
        return option.envvar
    found = _TWIN.search(getattr(option, "help", None) or "")
    return found.group(1) if found else None


@pytest.mark.parametrize("name", sorted(_COMMANDS))
def test_every_flag_shows_its_environment_twin_whole_at_80_columns(name: str) -> None:
    """Each flag of each command has an EVALQ_* twin, printed in full (no Rich markup, no cut)."""
    flags = [
        p
        for p in _COMMANDS[name].params
        if p.param_type_name == "option" and p.name not in ("help", "show_version")
    ]
    text = _help(*name.split())
    assert "…" not in text
    for flag in flags:
        variable = _twin(flag)
        assert variable is not None, f"{name} {flag.opts[0]} has no environment twin"
        assert f"[env var: {variable}]" in " ".join(text.split()).replace("│ ", ""), variable


def test_version_prints_the_installed_version() -> None:
    """`evalq --version` prints `evalq <version>` and exits 0."""
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"evalq {version('evalq')}"
