"""``evalq config check [FILE]``: validate the file and the environment, show what a worker gets.

:func:`check_configuration` returns the text to print and the exit status: 0 with the effective
configuration (every setting, where its value came from, secrets and URL passwords masked, and
the metric-set version results will carry), or 2 with every problem found, one a line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr

from worker.config_file import read_config_file
from worker.settings import (
    ENV_PREFIX,
    RETRY_FIELDS,
    ConfigError,
    EvaluationConfig,
    Settings,
    file_fields,
    load_settings,
)

__all__ = ["EXIT_INVALID", "check_configuration"]

EXIT_INVALID = 2
"""Exit status of an invalid configuration (as every command's start)."""
_MASK = "***"
_URL_FIELDS = ("broker_url", "store_url", "judge_url", "otlp_endpoint")


def _masked_url(url: str) -> str:
    """``url`` without its password and query (either may hold a secret)."""
    parts = urlsplit(url)
    if parts.password is None and not parts.query:
        return url  # nothing secret; unsplitting would also rewrite sqlite:///path
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        name = user.partition(":")[0]
        netloc = f"{name}:{_MASK}@{host}"
    query = _MASK if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _shown(name: str, value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, SecretStr):
        return _MASK
    if name in _URL_FIELDS:
        return _masked_url(str(value))
    if isinstance(value, tuple):
        return ", ".join(str(item) for item in value) or "(none)"
    return str(getattr(value, "value", value))


def _variable(name: str) -> str:
    return "TYPESAFE_API_KEY" if name == "typesafe_api_key" else ENV_PREFIX + name.upper()


def _source(name: str, file_keys: set[str]) -> str:
    if name == "config" and name in file_keys:
        return "argument"
    variable = _variable(name)
    if variable in os.environ:
        return f"env {variable}"
    return "file" if name in file_keys else "default"


def _file_keys(path: Path | None) -> set[str]:
    if path is None:
        return set()
    values, _ = read_config_file(path, file_fields())
    return set(values)


def _section(title: str, names: list[str], settings: Settings, file_keys: set[str]) -> list[str]:
    width = max(len(name) for name in names)
    lines = [f"[{title}]"]
    for name in names:
        value = _shown(name, getattr(settings, name))
        lines.append(f"  {name:<{width}}  {value}  ({_source(name, file_keys)})")
    return lines


def _effective(settings: Settings, *, argument: bool) -> str:
    from worker.runtime import configured_metric_set  # noqa: PLC0415 - judges, store: only here

    file_keys = _file_keys(settings.config) | ({"config"} if argument else set())
    evaluation = list(EvaluationConfig.model_fields)
    retry = list(RETRY_FIELDS)
    service = [name for name in Settings.model_fields if name not in (*evaluation, *retry)]
    metric_set = configured_metric_set(settings, settings.metric_set)
    lines = [
        f"configuration valid (file: {settings.config or 'none'})",
        *_section("evaluation", evaluation, settings, file_keys),
        *_section("retry", retry, settings, file_keys),
        *_section("service", service, settings, file_keys),
        f"metric set {metric_set.name}: {', '.join(metric_set.metric_ids)}",
        f"metric-set version: {metric_set.version}",
    ]
    lines.append(_retry_line(settings))
    if settings.thresholds_are_demo:
        lines.append("thresholds: demo pair 0.2,0.8 (synthetic judge only; calibrate real ones)")
    return "\n".join(lines)


def _retry_line(settings: Settings) -> str:
    policy = settings.retry
    if not policy.automatic:
        return "automatic retry: off (retry_max_attempts 1; `evalq retry` re-evaluates on demand)"
    return (
        f"automatic retry: on, up to {policy.max_attempts} attempts of a snapshot whose newest "
        f"has {', '.join(policy.reasons)}; back-off {policy.backoff_s:g} s, doubling"
    )


def _installed(settings: Settings) -> None:
    """What the settings ask for is installed (``EVALQ_OTLP_ENDPOINT``: the ``otel`` extra)."""
    if settings.otlp_endpoint is not None:
        from worker.otel_export import require_extra  # noqa: PLC0415 - only when configured

        require_extra()


def check_configuration(file: Path | None = None) -> tuple[str, int]:
    """Validate ``file`` (else ``EVALQ_CONFIG``) and this environment: (text, exit status)."""
    try:
        settings = load_settings(config=file)
        _installed(settings)
    except ConfigError as exc:
        count = len(exc.problems)
        head = f"configuration invalid: {count} problem{'s' if count != 1 else ''}"
        return "\n".join([head, *(f"  {problem}" for problem in exc.problems)]), EXIT_INVALID
    return _effective(settings, argument=file is not None), 0
