"""The supervisor of a multi-process worker: what each consumer process is told (in-process)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from producer.topology import Lane
from worker.lifecycle import PARENT_ENV
from worker.runtime import BESIDE_LIVE_ENV
from worker.settings import load_settings
from worker.supervisor import BESIDE_LIVE_NICE, Supervisor, plan, shares


def test_each_child_gets_the_flags_of_the_command_and_its_share() -> None:
    """A child reads only its environment: the command's lanes and log level reach it there."""
    settings = load_settings(lanes="backfill", concurrency=10, processes=2, log_level="warning")
    env = Supervisor(settings)._env(plan(settings)[0])
    assert env["EVALQ_LANES"] == "backfill"
    assert env["EVALQ_LOG_LEVEL"] == "WARNING"
    assert (env["EVALQ_PROCESSES"], env["EVALQ_CONCURRENCY"]) == ("1", "5")
    assert env[PARENT_ENV] == str(os.getpid())


def test_each_child_reads_the_configuration_file_of_the_command(tmp_path: Path) -> None:
    """`evalq worker --config FILE`: every child gets EVALQ_CONFIG, an absolute path."""
    path = tmp_path / "evalq.toml"
    path.write_text('[evaluation]\nmetrics = ["grounded"]\n', encoding="utf-8")
    settings = load_settings(config=path, processes=2)
    env = Supervisor(settings)._env(plan(settings)[0])
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


def test_the_live_lane_gets_consumer_processes_of_its_own() -> None:
    """Two live-only children and two for the other lanes, each group splitting all concurrency."""
    settings = load_settings(concurrency=256, processes=2)
    children = [(p.lanes, p.share) for p in plan(settings)]
    rest = (Lane.BACKFILL, Lane.OUTCOMES)
    assert children == [((Lane.LIVE,), 128), ((Lane.LIVE,), 128), (rest, 128), (rest, 128)]
    nices = [Supervisor(settings)._env(p)["EVALQ_NICE"] for p in plan(settings)]
    assert nices == ["0", "0", str(BESIDE_LIVE_NICE), str(BESIDE_LIVE_NICE)]
    beside = [Supervisor(settings)._env(p)[BESIDE_LIVE_ENV] for p in plan(settings)]
    assert beside == ["0", "0", "1", "1"]  # the other group's in-flight follows the judge
    assert [Supervisor(settings)._env(p)["EVALQ_LANES"] for p in plan(settings)] == [
        "live",
        "live",
        "backfill,outcomes",
        "backfill,outcomes",
    ]


@pytest.mark.parametrize(
    ("lanes", "groups"),
    [
        ((Lane.LIVE,), [(Lane.LIVE,)]),
        ((Lane.BACKFILL,), [(Lane.BACKFILL,)]),
        ((Lane.BACKFILL, Lane.OUTCOMES), [(Lane.BACKFILL, Lane.OUTCOMES)]),
        ((Lane.LIVE, Lane.OUTCOMES), [(Lane.LIVE,), (Lane.OUTCOMES,)]),
    ],
)
def test_a_single_lane_or_a_worker_without_live_is_one_group(
    lanes: tuple[Lane, ...], groups: list[tuple[Lane, ...]]
) -> None:
    """Only a worker serving live beside other lanes splits; nothing else changes shape."""
    value = ",".join(lane.value for lane in lanes)
    assert list(load_settings(lanes=value).lane_groups) == groups


def test_a_configured_nice_is_kept_and_never_lowered_beside_live() -> None:
    """A configured nice reaches every child unlowered; a worker without live is not reniced."""
    # The backfill group's default nice is 10: a configured 15 must not drop to it.
    both = load_settings(processes=2, nice=15)
    assert {p.nice for p in plan(both)} == {15}
    alone = load_settings(lanes="backfill", processes=2)
    assert {p.nice for p in plan(alone)} == {0}
    assert {Supervisor(alone)._env(p)[BESIDE_LIVE_ENV] for p in plan(alone)} == {"0"}
