"""The evaluation configuration: the TOML file, its environment overrides, every refusal,
metric-set versions, ``evalq config check`` and a worker that evaluates only the listed metrics.

In-process (``load_settings``, ``check_configuration``, a runtime under ``runtime.use``); the
``evalq`` console script's exit codes are pinned in ``test_config_cli.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from producer import Lane, observe
from producer.snapshot import EVALUATE_TASK, Snapshot
from tests.producer.fake_llm_server import openai_text, running
from tests.queue.queue_kit import example_snapshots
from worker import runtime
from worker.config_check import check_configuration
from worker.dead_letters import raw_bytes
from worker.handling import Delivery, Handler, Verdict
from worker.judges import SyntheticJudge
from worker.metric_sets import metric_names
from worker.runtime import Runtime, configured_metric_set
from worker.settings import ConfigError, EvaluationConfig, load_settings
from worker.store import open_store

SEVEN = (
    "tool_choice",
    "used_tool_result",
    "grounded",
    "stayed_in_scope",
    "answer_relevancy",
    "completeness",
    "indirect_injection",
)
AGENT = (*SEVEN, "tool_execution")
"""The agent set without a list: the seven agent metrics, then the deterministic tool_execution."""
EXAMPLE = """\
[evaluation]
mode = "shadow"
version = "orders-v1"
budget_s = 3.0
thresholds = [0.2, 0.8]
max_questions = 128
max_state_chars = 100000
metrics = ["tool_choice", "used_tool_result", "grounded", "completeness"]
"""


def _file(directory: Path, text: str, name: str = "evalq.toml") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def _evaluation(directory: Path, **values: str) -> Path:
    """A file whose [evaluation] table holds ``values`` (TOML literals)."""
    lines = [f"{key} = {value}" for key, value in values.items()]
    return _file(directory, "\n".join(["[evaluation]", *lines, ""]))


def _problems(**overrides: Any) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as caught:
        load_settings(**overrides)
    return caught.value.problems


def test_the_issue_example_is_read_whole(workdir: Path) -> None:
    """Every key of the example file reaches the frozen EvaluationConfig."""
    config = load_settings(config=_file(workdir, EXAMPLE)).evaluation
    assert config == EvaluationConfig(
        mode="shadow",
        version="orders-v1",
        budget_s=3.0,
        thresholds=(0.2, 0.8),
        max_questions=128,
        max_state_chars=100_000,
        metrics=("tool_choice", "used_tool_result", "grounded", "completeness"),
    )
    with pytest.raises(ValueError, match="frozen"):
        config.mode = "off"  # type: ignore[misc]


def test_defaults_without_a_file_are_off_and_the_agent_set(workdir: Path) -> None:
    """No file: mode off, no version, the agent set's eight metrics; trajectory_match is opt-in."""
    settings = load_settings()
    assert settings.evaluation.mode == "off"
    assert settings.evaluation.version is None
    assert configured_metric_set(settings, "agent").metric_ids == AGENT
    assert metric_names() == (*AGENT, "trajectory_match")


def test_environment_beats_the_file_and_flags_beat_both(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EVALQ_CONFIG names the file; an EVALQ_* variable overrides its key; a flag overrides both."""
    path = _evaluation(workdir, budget_s="5.0", max_questions="64", mode='"SHADOW"')
    monkeypatch.setenv("EVALQ_CONFIG", str(path))
    monkeypatch.setenv("EVALQ_BUDGET_S", "7")
    settings = load_settings()
    assert (settings.budget_s, settings.max_questions, settings.mode) == (7.0, 64, "shadow")
    assert load_settings(budget_s=2.0).budget_s == 2.0


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"budget_s": "30.5"}, "[evaluation] budget_s: Input should be less than or equal to 30"),
        ({"max_questions": "513"}, "[evaluation] max_questions: Input should be less than or"),
        ({"max_state_chars": "1_000_001"}, "[evaluation] max_state_chars: Input should be less"),
        ({"mode": '"enforce"'}, "[evaluation] mode: enforce is refused"),
        ({"mode": '"ENFORCE"'}, "[evaluation] mode: enforce is refused"),
        (
            {"metrics": '["tool_choise"]'},
            "unknown metric 'tool_choise' (did you mean tool_choice?)",
        ),
        ({"metrics": '["tool_choice", "tool_choice"]'}, "duplicate metric 'tool_choice'"),
        ({"thresholds": "[0.8, 0.2]"}, "[evaluation] thresholds: thresholds must satisfy"),
        (
            {"max_question": "5"},
            "[evaluation] max_question: unknown key (did you mean max_questions",
        ),
        ({"judge_url": '"https://judge"'}, "judge_url: a judge endpoint or key does not belong"),
        ({"judge_api_key": '"k"'}, "judge_api_key: a judge endpoint or key does not belong"),
        ({"api_key": '"k"'}, "api_key: a judge endpoint or key does not belong"),
        ({"endpoint": '"https://judge"'}, "endpoint: a judge endpoint or key does not belong"),
    ],
)
def test_each_refusal_in_the_file_names_its_key(
    workdir: Path, values: dict[str, str], expected: str
) -> None:
    """Budget 30.5, 513 questions, 1,000,001 chars, enforce, metrics, endpoints, unknown keys."""
    problems = _problems(config=_evaluation(workdir, **values))
    assert len(problems) == 1
    assert expected in problems[0]
    assert problems[0].startswith(str(workdir / "evalq.toml"))


def test_an_endpoint_in_the_file_says_it_belongs_to_the_environment(workdir: Path) -> None:
    """A judge endpoint (a table too) is refused pointing at the deployment's variables."""
    path = _file(workdir, '[evaluation]\nmode = "off"\n[judge]\nurl = "https://judge"\n')
    (problem,) = _problems(config=path)
    assert "[judge]: a judge endpoint or key does not belong in the evaluation file" in problem
    assert "deployment's environment (EVALQ_JUDGE," in problem
    assert "https://judge" not in problem  # a value is never echoed


def test_an_unknown_table_is_refused_with_the_closest_name(workdir: Path) -> None:
    """``[evalution]`` is not silently ignored: did you mean evaluation?"""
    (problem,) = _problems(config=_file(workdir, "[evalution]\nbudget_s = 3.0\n"))
    assert "unknown table or key 'evalution' (did you mean evaluation?)" in problem


def test_a_missing_or_broken_file_is_one_problem(workdir: Path) -> None:
    """A file that cannot be read or is not TOML is named, under EVALQ_CONFIG."""
    (missing,) = _problems(config=workdir / "absent.toml")
    assert missing.startswith("EVALQ_CONFIG: cannot read")
    assert "FileNotFoundError" in missing
    (broken,) = _problems(config=_file(workdir, "[evaluation\n"))
    assert broken.startswith("EVALQ_CONFIG:")
    assert "not valid TOML" in broken


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("EVALQ_BUDGET_S", "30.5", "EVALQ_BUDGET_S: Input should be less than or equal to 30"),
        ("EVALQ_BUDGET_S", "300", "EVALQ_BUDGET_S: Input should be less than or equal to 30"),
        ("EVALQ_MAX_QUESTIONS", "513", "EVALQ_MAX_QUESTIONS: Input should be less than or equal"),
        ("EVALQ_MAX_STATE_CHARS", "1000001", "EVALQ_MAX_STATE_CHARS: Input should be less than"),
        ("EVALQ_MODE", "ENFORCE", "EVALQ_MODE: enforce is refused"),
        ("EVALQ_MODE", "block", "EVALQ_MODE: expected off or shadow"),
        ("EVALQ_METRICS", "tool_choice,tool_choice", "EVALQ_METRICS: duplicate metric"),
        ("EVALQ_METRICS", "nope", "EVALQ_METRICS: unknown metric 'nope'"),
        ("EVALQ_VERSION", "has space", "EVALQ_VERSION: expected 1-64 letters"),
        ("EVALQ_BUDGET", "3", "EVALQ_BUDGET: unknown variable (did you mean EVALQ_BUDGET_S?)"),
        ("EVALQ_THRESHOLD", "0.2,0.8", "unknown variable (did you mean EVALQ_THRESHOLDS?)"),
        ("EVALQ_STATUS_JSN", "1", "unknown variable (did you mean EVALQ_STATUS_JSON?)"),
    ],
)
def test_each_refusal_in_the_environment_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    """The issue's examples (EVALQ_BUDGET=3, ENFORCE, duplicates, 300 s) fail at start."""
    monkeypatch.setenv(name, value)
    (problem,) = _problems()
    assert problem.startswith(name)
    assert expected in problem


def test_an_unknown_variable_without_a_close_name_is_still_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name nothing resembles is refused without a suggestion."""
    monkeypatch.setenv("EVALQ_QQQQQQQQQQQQQQQQQQQQQ", "1")
    assert _problems() == ("EVALQ_QQQQQQQQQQQQQQQQQQQQQ: unknown variable",)


def test_known_and_reserved_variables_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Command-flag twins, internal names and the reserved EVALQ_TEST_ prefix start fine."""
    for name in ("EVALQ_STATUS_JSON", "EVALQ_RUN_WORKER", "EVALQ_SUPERVISOR_PID"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("EVALQ_TEST_ANYTHING_AT_ALL", "1")
    assert load_settings().budget_s == 3.0


def test_a_removed_variable_keeps_its_own_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    """EVALQ_POOL_THREADS says what replaced it, and is not reported as unknown too."""
    monkeypatch.setenv("EVALQ_POOL_THREADS", "8")
    assert _problems() == (
        "EVALQ_POOL_THREADS: removed; evaluations no longer take a thread each; "
        "set EVALQ_CONCURRENCY",
    )


def test_every_problem_is_reported_not_just_the_first(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Variable, file key and file value problems come together in one ConfigError."""
    monkeypatch.setenv("EVALQ_BUDGET", "3")
    path = _evaluation(workdir, max_question="5", budget_s="31", metrics='["x"]')
    problems = _problems(config=path)
    assert len(problems) == 4
    assert [p.split(":")[0].rsplit(" ", 1)[-1] for p in problems] == [
        "EVALQ_BUDGET",
        "max_question",
        "budget_s",
        "metrics",
    ]


def test_thresholds_are_required_for_a_real_judge_from_either_source(workdir: Path) -> None:
    """A non-synthetic judge without thresholds is refused; the file may supply them."""
    (problem,) = _problems(judge="systemone", judge_api_key="k")
    assert problem.startswith("EVALQ_THRESHOLDS: required for a non-synthetic judge")
    path = _evaluation(workdir, thresholds="[0.3, 0.7]")
    settings = load_settings(judge="systemone", judge_api_key="k", config=path)
    assert settings.evaluation.thresholds == (0.3, 0.7)


def _version(workdir: Path, **values: str) -> str:
    settings = load_settings(config=_evaluation(workdir, **values))
    return configured_metric_set(settings, "agent").version


def test_version_metrics_and_thresholds_make_a_new_metric_set_version(workdir: Path) -> None:
    """A changed version, metric list or threshold is a new version; an unchanged one reuses it."""
    base = {"version": '"orders-v1"', "metrics": '["tool_choice", "grounded"]'}
    first = _version(workdir, **base)
    assert first.startswith("agent:orders-v1@")
    assert _version(workdir, **base) == first  # unchanged: reused
    assert _version(workdir, **base, budget_s="9.0") == first  # time is not a different question
    assert _version(workdir, **{**base, "version": '"orders-v2"'}) != first
    assert _version(workdir, **{**base, "metrics": '["tool_choice"]'}) != first
    assert _version(workdir, **base, thresholds="[0.3, 0.8]") != first


def test_no_version_and_the_agent_list_keep_the_earlier_metric_set_version(workdir: Path) -> None:
    """Listing the agent set's metrics in order without a version is the default: reused."""
    default = configured_metric_set(load_settings(), "agent").version
    listed = _version(workdir, metrics=str(list(AGENT)).replace("'", '"'))
    assert listed == default
    assert default.startswith("agent@")


def test_trajectory_match_is_opt_in(workdir: Path) -> None:
    """Only a list naming trajectory_match evaluates it with the agent set."""
    settings = load_settings(
        config=_evaluation(workdir, metrics='["grounded", "trajectory_match"]')
    )
    assert configured_metric_set(settings, "agent").metric_ids == ("grounded", "trajectory_match")
    assert configured_metric_set(settings, "agent+trajectory").metric_ids == (
        "grounded",
        "trajectory_match",
    )


def test_config_check_prints_the_effective_configuration_masked(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 0: every setting with its source, secrets and URL passwords masked, the version."""
    monkeypatch.setenv("EVALQ_BROKER_URL", "redis://:hunter2@redis:6379/0")
    monkeypatch.setenv("EVALQ_JUDGE_API_KEY", "sk-secret-key")
    monkeypatch.setenv("EVALQ_BUDGET_S", "4")
    text, status = check_configuration(_file(workdir, EXAMPLE))
    assert status == 0
    assert "hunter2" not in text
    assert "sk-secret-key" not in text
    assert "redis://:***@redis:6379/0  (env EVALQ_BROKER_URL)" in text
    assert "judge_api_key         ***  (env EVALQ_JUDGE_API_KEY)" in text
    assert "budget_s         4.0  (env EVALQ_BUDGET_S)" in text
    assert "mode             shadow  (file)" in text
    assert "metric set agent: tool_choice, used_tool_result, grounded, completeness" in text
    assert "metric-set version: agent:orders-v1@" in text


def test_config_check_names_each_problem_and_exits_2(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 2 with one line per problem, values never echoed."""
    monkeypatch.setenv("EVALQ_BUDGET", "3")
    path = _evaluation(workdir, mode='"enforce"', api_key='"sk-in-file"')
    text, status = check_configuration(path)
    assert status == 2
    lines = text.splitlines()
    assert lines[0] == "configuration invalid: 3 problems"
    assert "EVALQ_BUDGET: unknown variable (did you mean EVALQ_BUDGET_S?)" in lines[1]
    assert "sk-in-file" not in text
    assert any("mode: enforce is refused" in line for line in lines[2:])


def test_a_worker_with_a_metric_list_evaluates_only_those(workdir: Path) -> None:
    """Handled in-process under runtime.use: the record holds exactly the listed metrics."""
    path = _evaluation(workdir, metrics='["grounded", "completeness"]', version='"v7"')
    settings = load_settings(config=path, processes=1)
    snapshot = example_snapshots()["order-42"]
    item = snapshot.wire()
    delivery = Delivery(EVALUATE_TASK, (item,), {}, Lane.LIVE, raw_bytes(item))
    with open_store(f"sqlite:///{workdir / 'evalq.db'}") as store:
        rt = Runtime(settings, store=store, judge=SyntheticJudge())
        try:
            with runtime.use(rt):
                verdicts = rt.call(Handler(rt).handle([delivery]), timeout_s=30.0)
        finally:
            rt.close()
        version = configured_metric_set(settings, snapshot.metric_set).version
        stored = store.find_evaluation(snapshot.snapshot_id, version)
    assert verdicts == [Verdict.ACK]
    assert stored is not None
    assert stored.record.metric_set_version.startswith("agent:v7@")
    assert [r.metric_id for r in stored.record.results] == ["grounded", "completeness"]


class _ListSink:
    """Collects what the observer submits."""

    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []

    def submit(self, snapshot: Snapshot) -> bool:
        self.snapshots.append(snapshot)
        return True


def _observed(config: EvaluationConfig) -> list[Snapshot]:
    """One real OpenAI-SDK call under an observation configured from ``config``."""
    sink = _ListSink()
    with running() as llm:
        llm.replies["/v1/chat/completions"].append(openai_text("Hello."))
        client = openai.OpenAI(base_url=f"{llm.url}/v1", api_key="test-key", max_retries=0)
        with observe(
            sink,
            trace_id="cfg-1",
            sdk="openai",
            mode=config.mode,
            capture_limit_chars=config.max_state_chars,
        ) as obs:
            messages: Any = [{"role": "user", "content": "Hi?"}]
            obs.call(client.chat.completions.create, model="m", messages=messages)
    return sink.snapshots


def test_the_observer_follows_the_files_mode(workdir: Path) -> None:
    """The file's mode drives observe(): shadow submits the invocation, the default off does not."""
    shadow = load_settings(config=_evaluation(workdir, mode='"SHADOW"')).evaluation
    assert len(_observed(shadow)) == 1
    assert _observed(load_settings().evaluation) == []
