"""What ``evalq`` refuses, and how: unknown values list the valid ones; a missing store is named."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from typer.testing import CliRunner, Result

from worker.cli import app
from worker.dead_letters import DeadLetterCode
from worker.metric_sets import reported_metric_ids


def _invoke(directory: Path, *argv: str, **env: str) -> Result:
    with contextlib.chdir(directory):
        return CliRunner().invoke(app, list(argv), env=env)


def test_report_refuses_an_unknown_metric_and_lists_the_known_ones(tmp_path: Path) -> None:
    """`report --metrics nosuchmetric`: exit 2 naming it and every known metric id."""
    result = _invoke(tmp_path, "report", "--metrics", "grounded,nosuchmetric")
    assert result.exit_code == 2
    assert "unknown metric id nosuchmetric" in result.output
    assert all(metric in result.output for metric in reported_metric_ids())
    assert {"grounded", "trajectory_match", "call_valid"} <= set(reported_metric_ids())


def test_redrive_refuses_an_unknown_reason_and_lists_the_codes(tmp_path: Path) -> None:
    """`redrive --reason NOSUCHCODE`: exit 2 before any store or broker, listing every code."""
    result = _invoke(tmp_path, "redrive", "--reason", "NOSUCHCODE")
    assert result.exit_code == 2
    assert "unknown reason code NOSUCHCODE" in result.output
    assert all(code.value in result.output for code in DeadLetterCode)
    assert list(tmp_path.iterdir()) == []


def test_report_and_status_without_a_store_say_so_and_create_none() -> None:
    """No evalq.db here: report and status exit 2 in one line naming the path and the variable."""
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        for command in ("report", "status"):
            result = _invoke(directory, command)
            assert result.exit_code == 2, result.output
            text = " ".join(result.output.split())
            where = directory.resolve() / "evalq.db"
            assert text.startswith(f"EVALQ_STORE_URL: {where} does not exist (NO_STORE);"), text
            assert "point EVALQ_STORE_URL at the workers' store" in text
        assert list(directory.iterdir()) == []


def test_queue_exporter_without_a_broker_names_the_variable(tmp_path: Path) -> None:
    """`evalq queue-exporter` with no EVALQ_BROKER_URL: exit 2 naming it, nothing served."""
    result = _invoke(tmp_path, "queue-exporter", "--port", "0")
    assert result.exit_code == 2
    assert "EVALQ_BROKER_URL" in result.output
