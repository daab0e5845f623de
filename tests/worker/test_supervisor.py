"""The supervisor of a multi-process worker: what each consumer process is told (in-process)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker.lifecycle import PARENT_ENV
from worker.settings import load_settings
from worker.supervisor import Supervisor, shares


def test_each_child_gets_the_flags_of_the_command_and_its_share() -> None:
    """A child reads only its environment: the command's lanes and log level reach it there."""
    settings = load_settings(lanes="backfill", concurrency=10, processes=2, log_level="warning")
    env = Supervisor(settings)._env(5)
    assert env["EVALQ_LANES"] == "backfill"
    assert env["EVALQ_LOG_LEVEL"] == "WARNING"
    assert (env["EVALQ_PROCESSES"], env["EVALQ_CONCURRENCY"]) == ("1", "5")
    assert env[PARENT_ENV] == str(os.getpid())


def test_each_child_reads_the_configuration_file_of_the_command(tmp_path: Path) -> None:
    """`evalq worker --config FILE`: every child gets EVALQ_CONFIG, an absolute path."""
    path = tmp_path / "evalq.toml"
    path.write_text('[evaluation]\nmetrics = ["grounded"]\n', encoding="utf-8")
    env = Supervisor(load_settings(config=path, processes=2))._env(5)
    assert env["EVALQ_CONFIG"] == str(path.resolve())
    assert Path(env["EVALQ_CONFIG"]).is_absolute()


@pytest.mark.parametrize(
    ("concurrency", "processes", "expected"),
    [(256, 2, [128, 128]), (5, 2, [3, 2]), (1, 4, [1]), (7, 3, [3, 2, 2])],
)
def test_concurrency_is_split_evenly_and_never_to_zero(
    concurrency: int, processes: int, expected: list[int]
) -> None:
    """Shares add up to the worker's concurrency; no process is started without a slot."""
    assert shares(concurrency, processes) == expected
    assert sum(shares(concurrency, processes)) == concurrency


def test_node_names_keep_the_given_hostname_per_process() -> None:
    """``--hostname backfill@%h`` gives ``backfill.0@%h``, ``backfill.1@%h``."""
    supervisor = Supervisor(load_settings(processes=2), hostname="backfill@%h")
    assert [supervisor._node(i) for i in (0, 1)] == ["backfill.0@%h", "backfill.1@%h"]
