"""``evalq`` with random arguments and configuration: an exit code and a message, never a
traceback.

Flags are drawn from the commands' own declarations (so new flags are fuzzed too), values from
nasty text, numbers and paths that do not exist. No broker is configured, so no command can
start a pipeline; the store is a SQLite file in the example's own directory.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.properties.strategies import examples
from worker.cli import app
from worker.reporting import BREACH_EXIT_CODE

COMMAND: Any = typer.main.get_command(app)  # typer's own (vendored) click types
SUBCOMMANDS: dict[str, Any] = dict(COMMAND.commands)
SETTINGS = (
    "BUDGET_S",
    "THRESHOLDS",
    "JUDGE",
    "JUDGE_URL",
    "JUDGE_MODEL",
    "CONCURRENCY",
    "BATCH_SIZE",
    "LANES",
    "METRIC_SET",
    "LOG_LEVEL",
    "VISIBILITY_TIMEOUT_S",
    "MAX_QUESTIONS",
    "METRICS_PORT",
    "MODE",
    "METRICS",
    "VERSION",
    "CONFIG",
    "BUDGET",  # not a setting: refused at start (exit 2)
)
"""Settings worth fuzzing from the environment (never the broker or store URLs: see module)."""

_values = st.one_of(
    st.text(max_size=10),
    st.sampled_from(["", "-1", "0", "1e309", "nan", "inf", "9" * 30, "live", "auto", "-", "--"]),
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=True).map(str),
    st.text(min_size=1, max_size=8).map(lambda t: f"missing/{t}.jsonl"),
)


@st.composite
def _argv(draw: st.DrawFn) -> list[str]:
    name = draw(st.sampled_from([*SUBCOMMANDS, "no-such-command", "--help", ""]))
    command = SUBCOMMANDS.get(name)
    argv = [name] if name else []
    if command is None or not command.params:  # unknown, or a group (e.g. `store`)
        return argv + draw(st.lists(_values, max_size=3))
    for param in draw(st.lists(st.sampled_from(command.params), max_size=4)):
        if param.param_type_name == "argument":
            argv += draw(st.lists(_values, min_size=1, max_size=2))
        elif getattr(param, "is_flag", False):
            argv.append(draw(st.sampled_from(list(param.opts) + list(param.secondary_opts))))
        else:
            argv += [draw(st.sampled_from(param.opts)), draw(_values)]
    return argv + draw(st.lists(_values, max_size=1))


def _environment(draw_env: dict[str, str], directory: str) -> dict[str, Any]:
    clean: dict[str, Any] = {k: None for k in os.environ if k.startswith(("EVALQ_", "TYPESAFE_"))}
    clean["EVALQ_STORE_URL"] = f"sqlite:///{directory}/fuzz.db"
    clean.update({f"EVALQ_{key}": value for key, value in draw_env.items()})
    return clean


@settings(
    max_examples=examples(120),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    argv=_argv(),
    env=st.dictionaries(st.sampled_from(SETTINGS), _values.filter(lambda v: "\x00" not in v)),
)
def test_random_arguments_give_an_exit_code_and_a_message_never_a_traceback(
    argv: list[str], env: dict[str, str]
) -> None:
    """Any argv and EVALQ_* values: exit 0/1/2 (3: a breach or gate) with output; no exception."""
    argv = [a.replace("\x00", "") for a in argv]  # argv cannot carry NUL (execve refuses it)
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as directory, contextlib.chdir(directory):
        result = runner.invoke(app, argv, env=_environment(env, directory))
    output = result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        argv,
        env,
        repr(result.exception),
    )
    assert "Traceback" not in output, (argv, output[-2000:])
    breaches = argv[:1] in (["status"], ["report"])  # a threshold, or a --fail-under gate
    allowed = {0, 1, 2} | ({BREACH_EXIT_CODE} if breaches else set())
    assert result.exit_code in allowed, (argv, result.exit_code, output[-500:])
    if result.exit_code != 0:
        assert output.strip(), (argv, "a failure must say why")


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["report", "--html", "missing/report.html"], "--html"),  # a missing directory
        (["status", "--window-s", "1e20"], "--window-s"),  # an absurd window
    ],
)
def test_bad_option_value_is_a_message_not_a_traceback(argv: list[str], named: str) -> None:
    """A bad --html directory or --window-s value: exit 2 with a message naming the option."""
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as directory, contextlib.chdir(directory):
        result = runner.invoke(app, argv, env=_environment({}, directory))
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    assert named in result.output
