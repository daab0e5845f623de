"""``evalq run`` against a judge that refuses every request: exit 1 with a hint, and a second run
says its results were reused (already evaluated) instead of silently showing the old failure."""

from __future__ import annotations

from pathlib import Path

from tests.cli.cli_kit import evalq
from tests.queue.queue_kit import EXAMPLES
from worker.judges.testing import serve_in_thread


def _knobs(redis_url: str, store_url: str, judge_url: str, api_key: str) -> dict[str, str]:
    """`evalq run`'s settings against the stand-in System One judge with ``api_key``."""
    return {
        "broker_url": redis_url,
        "store_url": store_url,
        "judge": "systemone",
        "judge_url": judge_url,
        "judge_api_key": api_key,
        "thresholds": "0.2,0.8",
        "processes": "1",
    }


def test_run_exits_1_with_a_hint_when_every_judge_request_failed(
    redis_url: str, store_url: str, workdir: Path
) -> None:
    """A wrong key (401 on every request): exit 1, the hint names the key and `evalq retry`."""
    with serve_in_thread(api_key="the-right-key") as judge:
        knobs = _knobs(redis_url, store_url, judge.base_url, "a-wrong-key")
        first = evalq("run", str(EXAMPLES), cwd=workdir, settings=knobs, timeout_s=180)
        assert first.returncode == 1, first.stdout + first.stderr
        assert "every judge request failed" in first.stderr
        assert "EVALQ_JUDGE_API_KEY" in first.stderr
        assert "evalq retry" in first.stderr
        assert "a-wrong-key" not in first.stdout + first.stderr
        assert "reused:" not in first.stdout
        assert judge.count > 0

        again = evalq("run", str(EXAMPLES), cwd=workdir, settings=knobs, timeout_s=180)
        assert again.returncode == 1, again.stdout + again.stderr
        assert "reused: 6 of 6 snapshot(s) were already evaluated" in again.stdout
        assert "every judge request failed" in again.stderr


def test_run_with_a_working_judge_exits_0_and_reuses_nothing(
    redis_url: str, store_url: str, workdir: Path
) -> None:
    """The same run with the right key: exit 0, no hint, nothing reused."""
    with serve_in_thread(api_key="the-right-key") as judge:
        knobs = _knobs(redis_url, store_url, judge.base_url, "the-right-key")
        result = evalq("run", str(EXAMPLES), cwd=workdir, settings=knobs, timeout_s=180)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "every judge request failed" not in result.stderr
        assert "reused:" not in result.stdout
