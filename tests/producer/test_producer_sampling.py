"""Deterministic per-slice sampling: rates, cross-process stability, nesting, stamps and counts."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import uuid

import pytest
from pydantic import ValidationError

import producer._sampling as sampling_module
from producer._sampling import (
    OTHER_SLICE,
    Sampler,
    SamplingRule,
    SamplingTally,
    unit_value,
)
from producer.snapshot import Lane, Sampling
from tests.producer.producer_kit import make_snapshot


def _trace_ids(n: int, seed: int = 7) -> list[str]:
    """``n`` uuid-shaped trace ids from a fixed seed (like real ids, reproducible)."""
    rng = __import__("random").Random(seed)
    return [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(n)]


def test_rate_point_one_over_100k_ids_is_within_one_percent() -> None:
    """100k trace ids at rate 0.1 give a sampled fraction within 1% absolute of 10%."""
    sampler = Sampler(default_rate=0.1)
    ids = _trace_ids(100_000)
    sampled = sum(sampler.decide(make_snapshot(t)).sampled for t in ids[:2_000])
    fraction = sum(unit_value(t) < 0.1 for t in ids) / len(ids)
    assert abs(fraction - 0.1) < 0.01
    assert abs(sampled / 2_000 - 0.1) < 0.03  # the Sampler path agrees (smaller n, wider band)


_CHILD = """
import json, sys
from producer._sampling import unit_value
ids = json.load(sys.stdin)
print(json.dumps([unit_value(t) < 0.1 for t in ids]))
"""


def _decisions_in_subprocess(ids: list[str], hash_seed: str) -> list[bool]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps(ids),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    result: list[bool] = json.loads(done.stdout)
    return result


def test_decisions_identical_across_processes_with_different_hash_seeds() -> None:
    """Two processes with different PYTHONHASHSEED decide exactly like this one, id for id."""
    ids = _trace_ids(5_000, seed=11)
    here = [unit_value(t) < 0.1 for t in ids]
    assert _decisions_in_subprocess(ids, "1") == here
    assert _decisions_in_subprocess(ids, "4242") == here
    assert 300 < sum(here) < 700  # and the decisions are not trivially constant


def test_nested_rates_give_nested_samples_with_the_same_salt() -> None:
    """With one salt, every trace sampled at a lower rate is sampled at each higher rate."""
    ids = _trace_ids(20_000, seed=3)
    rates = (0.01, 0.05, 0.1, 0.5)
    sets = [{t for t in ids if Sampler(default_rate=r).decide(make_snapshot(t)).sampled}
            for r in rates]  # fmt: skip
    for lower, higher in itertools.pairwise(sets):
        assert lower < higher  # strict subset: nested, and the higher rate adds traces


def test_a_rule_with_its_own_salt_draws_an_independent_sample() -> None:
    """A different salt decorrelates: overlap of two 10% samples is near 1%, not 10%."""
    ids = _trace_ids(20_000, seed=5)
    a = {t for t in ids if unit_value(t, "salt-a") < 0.1}
    b = {t for t in ids if unit_value(t, "salt-b") < 0.1}
    assert abs(len(a & b) / len(ids) - 0.01) < 0.005


def test_first_matching_slice_rule_wins_and_default_applies_otherwise() -> None:
    """Rules match version/environment/tool (incl. called tools); first match wins; else default."""
    sampler = Sampler(
        [
            SamplingRule(name="canary", rate=1.0, environment="canary"),
            SamplingRule(name="refunds", rate=0.5, tool=("refund", "chargeback")),
            SamplingRule(name="v2", rate=0.2, agent_version="v2"),
        ],
        default_rate=0.01,
    )
    both = make_snapshot("t1", environment="canary", tool="refund")
    assert sampler.rule_for(both).name == "canary"
    assert sampler.rule_for(make_snapshot("t2", tool="chargeback", agent_version="v2")).name == (
        "refunds"
    )
    assert sampler.rule_for(make_snapshot("t3", tool="search", agent_version="v2")).name == "v2"
    assert sampler.rule_for(make_snapshot("t4", agent_version="v1")).name == "default"


def test_sampled_snapshot_records_rate_weight_rule_lane_and_keeps_its_id() -> None:
    """A kept snapshot carries Sampling(lane, rate, weight=1/rate, rule); its id is unchanged."""
    # Sampling is provenance, so it does not change the snapshot id.
    sampler = Sampler([SamplingRule(name="v2", rate=0.25, agent_version="v2")], lane=Lane.LIVE)
    ids = [t for t in _trace_ids(200) if unit_value(t) < 0.25]
    original = make_snapshot(ids[0], agent_version="v2")
    old_id = original.snapshot_id
    kept = sampler.sample(original)
    assert kept is not None
    assert kept.sampling == Sampling(lane=Lane.LIVE, rate=0.25, weight=4.0, rule="v2")
    assert kept.snapshot_id == old_id
    assert kept.snapshot_id == type(kept).model_validate(kept.wire()).snapshot_id
    assert kept.wire() != original.wire()  # the sampling facts still travel with it


def test_tally_counts_seen_and_sampled_out_per_rule_and_slice() -> None:
    """Counts per (rule, slice) add up: sampled + sampled_out = seen, matching the decisions."""
    sampler = Sampler([SamplingRule(name="v2", rate=0.5, agent_version="v2")], default_rate=0.1)
    ids = _trace_ids(4_000, seed=9)
    kept = {"v2": 0, "default": 0}
    for i, t in enumerate(ids):
        version = "v2" if i % 4 == 0 else "v1"
        if sampler.sample(make_snapshot(t, agent_version=version)) is not None:
            kept["v2" if version == "v2" else "default"] += 1
    rows = {row.rule: row for row in sampler.tally().rows}
    assert rows["v2"].seen == 1_000
    assert rows["default"].seen == 3_000
    assert rows["v2"].sampled == kept["v2"]
    assert rows["default"].sampled == kept["default"]
    assert rows["default"].sampled_out == 3_000 - kept["default"]
    assert rows["v2"].agent_version == "v2"
    assert rows["default"].agent_version == "v1"


def test_drain_resets_and_a_failed_report_restores_the_counts() -> None:
    """drain_tally hands out a delta; report() with a failing send puts the counts back."""
    sampler = Sampler(default_rate=0.5)
    for t in _trace_ids(100):
        sampler.sample(make_snapshot(t))

    def broken_send(tally: SamplingTally) -> None:
        raise ConnectionError

    with pytest.raises(ConnectionError):
        sampler.report(broken_send)
    assert sum(r.seen for r in sampler.tally().rows) == 100
    sent: list[SamplingTally] = []
    assert sampler.report(sent.append) is not None
    assert sum(r.seen for r in sent[0].rows) == 100
    assert sampler.tally().rows == ()
    assert SamplingTally.model_validate(sent[0].wire()) == sent[0]  # survives the wire


def test_tally_keys_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_TALLY_KEYS distinct slices, counts go to the 'other' slice (memory bounded)."""
    monkeypatch.setattr(sampling_module, "MAX_TALLY_KEYS", 3)
    sampler = Sampler()
    for i in range(10):
        sampler.sample(make_snapshot(f"t{i}", agent_version=f"v{i}"))
    rows = sampler.tally().rows
    assert len(rows) == 4
    other = [r for r in rows if r.agent_version == OTHER_SLICE]
    assert other[0].seen == 7


def test_rate_zero_rule_samples_nothing_but_counts() -> None:
    """A rate-0 slice is never sampled, yet every unit is counted as seen."""
    sampler = Sampler([SamplingRule(name="health", rate=0.0, environment="probe")])
    results = [sampler.sample(make_snapshot(t, environment="probe")) for t in _trace_ids(50)]
    assert results == [None] * 50
    assert sampler.tally().rows[0].seen == 50


@pytest.mark.parametrize(
    "values",
    [{"rate": 0.0}, {"rate": 1.5}, {"rate": math.nan}, {"weight": 0.0}, {"weight": math.inf}],
)
def test_sampling_refuses_rates_and_weights_outside_their_range(values: dict[str, float]) -> None:
    """Rate in (0, 1], weight positive and finite (an infinite weight has no JSON text)."""
    with pytest.raises(ValidationError, match="sampling rate must be in"):
        Sampling(lane=Lane.LIVE, **values)
