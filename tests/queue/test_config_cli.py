"""``evalq config check`` and ``--config`` as a user runs them: the console script, exit codes.

Subprocesses of the installed ``evalq`` script with a clean environment (no EVALQ_* leaks); the
check's text itself is pinned in-process in ``test_config_file.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.queue.queue_kit import EXAMPLES, worker_env

EVALQ = Path(sys.executable).with_name("evalq")
GOOD = """\
[evaluation]
mode = "shadow"
version = "orders-v1"
budget_s = 3.0
thresholds = [0.2, 0.8]
metrics = ["grounded", "completeness"]
"""


def _evalq(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    assert EVALQ.exists(), f"{EVALQ} is missing: pip install -e . in this virtualenv"
    return subprocess.run(
        [str(EVALQ), *args],
        cwd=cwd,
        env=worker_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _write(directory: Path, text: str) -> Path:
    path = directory / "evalq.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_valid_file_exits_0_and_prints_the_effective_configuration(workdir: Path) -> None:
    """`evalq config check FILE`: exit 0, the values and the metric-set version, keys masked."""
    path = _write(workdir, GOOD)
    done = _evalq("config", "check", str(path), cwd=workdir, judge_api_key="sk-top-secret")
    assert done.returncode == 0, done.stderr
    assert "configuration valid" in done.stdout
    assert "metric-set version: agent:orders-v1@" in done.stdout
    assert "sk-top-secret" not in done.stdout + done.stderr


def test_the_file_may_come_from_evalq_config(workdir: Path) -> None:
    """Without FILE the check reads EVALQ_CONFIG."""
    done = _evalq("config", "check", cwd=workdir, config=str(_write(workdir, GOOD)))
    assert done.returncode == 0, done.stderr
    assert "metric set agent: grounded, completeness" in done.stdout


def test_an_invalid_file_and_environment_exit_2_naming_each_problem(workdir: Path) -> None:
    """Exit 2 and one line per problem: the unknown variable with its suggestion, the file's."""
    path = _write(workdir, '[evaluation]\nbudget_s = 30.5\nmode = "enforce"\nmax_question = 1\n')
    done = _evalq("config", "check", str(path), cwd=workdir, budget="3")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "configuration invalid: 4 problems" in done.stderr
    assert "EVALQ_BUDGET: unknown variable (did you mean EVALQ_BUDGET_S?)" in done.stderr
    assert "budget_s: Input should be less than or equal to 30" in done.stderr
    assert "mode: enforce is refused" in done.stderr
    assert "max_question: unknown key (did you mean max_questions?)" in done.stderr


@pytest.mark.parametrize("command", [["worker"], ["status"], ["report", "--json"]])
def test_every_command_refuses_an_unknown_variable_at_start(
    workdir: Path, command: list[str]
) -> None:
    """A typo'd EVALQ_* variable stops any command with exit 2 before it does anything."""
    done = _evalq(*command, cwd=workdir, budget="3", broker_url="redis://127.0.0.1:1/0")
    assert done.returncode == 2
    said = " ".join(done.stderr.split())  # the console wraps long lines
    assert "EVALQ_BUDGET: unknown variable (did you mean EVALQ_BUDGET_S?)" in said


@pytest.mark.services
def test_run_with_config_evaluates_only_the_listed_metrics(workdir: Path) -> None:
    """`evalq run --config FILE`: its worker reads the file too; records hold the two metrics."""
    path = _write(workdir, GOOD)
    done = _evalq("run", str(EXAMPLES), "--config", str(path), "--timeout-s", "90", cwd=workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    report = _evalq("report", "--json", cwd=workdir)
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert set(data["metrics"]) == {"grounded", "completeness"}
