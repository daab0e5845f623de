"""Fixtures of the security tests: the fault suite's worker, judge and producer factories."""

from __future__ import annotations

from tests.faults.conftest import _clean_env, judge_server, producer_for, start_worker

__all__ = ["_clean_env", "judge_server", "producer_for", "start_worker"]
