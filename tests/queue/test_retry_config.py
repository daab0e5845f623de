"""The ``[retry]`` table: read whole, overridden by EVALQ_RETRY_*, every refusal named, shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from producer.snapshot import MAX_ATTEMPTS
from worker.auto_retry import automatic_retries, lookback_s, pass_interval_s
from worker.config_check import check_configuration
from worker.settings import ConfigError, RetryConfig, load_settings


def _file(directory: Path, text: str) -> Path:
    path = directory / "evalq.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _problems(**overrides: Any) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as caught:
        load_settings(**overrides)
    return caught.value.problems


def test_the_retry_table_is_read_whole(workdir: Path) -> None:
    """reasons, max_attempts and backoff_s reach the frozen RetryConfig; the policy is on."""
    path = _file(
        workdir, '[retry]\nreasons = ["BACKEND_ERROR"]\nmax_attempts = 4\nbackoff_s = 30\n'
    )
    policy = load_settings(config=path).retry
    assert policy == RetryConfig(reasons=("BACKEND_ERROR",), max_attempts=4, backoff_s=30.0)
    assert policy.automatic
    assert [policy.due_after_s(n) for n in (1, 2, 3)] == [30.0, 60.0, 120.0]


def test_without_the_table_the_policy_is_off(workdir: Path) -> None:
    """Defaults: BACKEND_ERROR and TIMEOUT, one attempt (automatic retry off), 60 s back-off."""
    policy = load_settings(config=_file(workdir, "[evaluation]\nbudget_s = 2.0\n")).retry
    assert policy == RetryConfig()
    assert policy.reasons == ("BACKEND_ERROR", "TIMEOUT")
    assert not policy.automatic


def test_the_environment_beats_the_file(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EVALQ_RETRY_MAX_ATTEMPTS and EVALQ_RETRY_REASONS override the file's keys."""
    path = _file(workdir, "[retry]\nmax_attempts = 4\n")
    monkeypatch.setenv("EVALQ_RETRY_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("EVALQ_RETRY_REASONS", "TIMEOUT,INVALID_RESPONSE")
    policy = load_settings(config=path).retry
    assert (policy.max_attempts, policy.reasons) == (2, ("TIMEOUT", "INVALID_RESPONSE"))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("max_attempts = 0", "[retry] max_attempts: Input should be greater than or equal to 1"),
        (
            f"max_attempts = {MAX_ATTEMPTS + 1}",
            f"[retry] max_attempts: Input should be less than or equal to {MAX_ATTEMPTS}",
        ),
        ("backoff_s = 0", "[retry] backoff_s: Input should be greater than 0"),
        ("backoff_s = 86401", "[retry] backoff_s: Input should be less than or equal to 86400"),
        (
            'reasons = ["BACKEND_EROR"]',
            "[retry] reasons: unknown reason code 'BACKEND_EROR' (did you mean BACKEND_ERROR?)",
        ),
        ("reasons = []", "[retry] reasons: at least one reason code"),
        ('reasons = ["TIMEOUT", "TIMEOUT"]', "[retry] reasons: duplicate reason code"),
        ("max_attempt = 3", "[retry] max_attempt: unknown key (did you mean max_attempts?)"),
    ],
)
def test_each_refusal_in_the_retry_table_names_its_key(
    workdir: Path, line: str, expected: str
) -> None:
    """A bad [retry] value or unknown key is one problem naming the file, table and key."""
    path = _file(workdir, f"[retry]\n{line}\n")
    problems = _problems(config=path)
    assert len(problems) == 1
    assert problems[0].startswith(str(path))
    assert expected in problems[0]


def test_a_key_in_the_retry_table_is_never_a_judge_endpoint(workdir: Path) -> None:
    """judge_url under [retry] is refused like anywhere else in the file."""
    path = _file(workdir, '[retry]\njudge_url = "http://127.0.0.1:1"\n')
    (problem,) = _problems(config=path)
    assert "[retry] judge_url: a judge endpoint or key does not belong" in problem


def test_a_misspelt_table_suggests_retry(workdir: Path) -> None:
    """[retyr] is an unknown table, with the closest valid one named."""
    (problem,) = _problems(config=_file(workdir, "[retyr]\nmax_attempts = 3\n"))
    assert "unknown table or key 'retyr' (did you mean retry?)" in problem


def test_an_environment_refusal_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """EVALQ_RETRY_BACKOFF_S=-1 names the variable, not a file."""
    monkeypatch.setenv("EVALQ_RETRY_BACKOFF_S", "-1")
    (problem,) = _problems()
    assert problem.startswith("EVALQ_RETRY_BACKOFF_S: ")


def test_config_check_shows_the_retry_table_and_the_policy(workdir: Path) -> None:
    """The [retry] section says each value's source, and whether automatic retry is on."""
    path = _file(workdir, "[retry]\nmax_attempts = 3\nbackoff_s = 5\n")
    text, status = check_configuration(path)
    assert status == 0
    assert "[retry]" in text
    assert "retry_max_attempts  3  (file)" in text
    assert "retry_reasons       BACKEND_ERROR, TIMEOUT  (default)" in text
    assert "automatic retry: on, up to 3 attempts" in text
    off, _ = check_configuration(_file(workdir, "[evaluation]\nbudget_s = 2.0\n"))
    assert "automatic retry: off" in off


def test_the_pass_paces_itself_from_the_back_off() -> None:
    """Passes run every half first back-off (0.5..60 s) and look back at least a day."""
    assert pass_interval_s(RetryConfig(max_attempts=3, backoff_s=1.0)) == 0.5
    assert pass_interval_s(RetryConfig(max_attempts=3, backoff_s=600.0)) == 60.0
    assert lookback_s(RetryConfig(max_attempts=3, backoff_s=60.0)) == 86_400.0
    long = RetryConfig(max_attempts=10, backoff_s=3600.0)
    assert lookback_s(long) == 2 * sum(3600.0 * 2 ** (n - 1) for n in range(1, 10))


def test_no_pass_runs_when_the_policy_is_off() -> None:
    """Default settings (max_attempts 1): evalq worker starts no automatic retry pass."""
    with automatic_retries(load_settings()) as auto:
        assert auto is None
