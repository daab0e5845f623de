"""compose.yaml: valid Compose, secrets only in the env file, and every command it runs is tested.

The Compose JSON schema is the official compose-spec.json as vendored (with its licence and
checksum) by the `check-jsonschema` package from PyPI: check_jsonschema/builtin_schemas/vendor/.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import subprocess
import time
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from tests.deploy.ops_kit import (
    BIN,
    ROOT,
    child_env,
    compose,
    env_example,
    env_file,
    get,
    localize,
    run_check,
    service,
    started,
    stop,
    wait_until,
)
from worker import cli, metrics
from worker.app import celery_config
from worker.embedded import free_port
from worker.judges import JudgeRequest, NoulQuestion, SystemOneJudge, use_deadline
from worker.runtime import _build_judge
from worker.settings import load_settings

ONE_SHOT = {"backfill-examples", "evalq"}
BROKER_ONLY = {"redis", "flower", "queue-exporter"}
"""Services given ops/broker.env alone (they need nothing of ops/evalq.env)."""
SECRET_NAME = re.compile(r"PASSWORD|SECRET|API_KEY|BASIC_AUTH|TOKEN", re.IGNORECASE)

# Every compose service → the tests that run its command (or, for third-party images, check the
# configuration that image is given). A new service without an entry fails the coverage test.
COVERAGE = {
    "redis": [
        "test_ops_redis_conf.py::test_queued_messages_survive_a_restart",
        "test_ops_redis_conf.py::test_redis_healthcheck_command_of_compose",
    ],
    "postgres": ["test_ops_compose.py::test_postgres_healthcheck_command_of_compose"],
    "judge": ["test_ops_compose.py::test_judge_command_serves_the_configured_workers"],
    "worker-live": [
        "test_ops_compose.py::test_evalq_commands_exist_with_their_flags",
        "test_ops_stack.py::test_compose_stack_runs_end_to_end",
    ],
    "worker-backfill": ["test_ops_stack.py::test_compose_stack_runs_end_to_end"],
    "outcomes": ["test_ops_stack.py::test_compose_stack_runs_end_to_end"],
    "queue-exporter": ["test_ops_metrics.py::test_queue_exporter_command_of_compose"],
    "flower": [
        "test_ops_flower.py::test_flower_ui_and_api_refuse_requests_without_credentials",
        "test_ops_flower.py::test_flower_healthcheck_command_of_compose",
    ],
    "backfill-examples": ["test_ops_stack.py::test_compose_stack_runs_end_to_end"],
    "evalq": [
        "test_ops_compose.py::test_evalq_commands_exist_with_their_flags",
        "test_ops_compose.py::test_runbook_evalq_commands_exist",
    ],
    "prometheus": ["test_ops_prometheus.py::test_prometheus_config_is_valid"],
    "grafana": [
        "test_ops_prometheus.py::test_dashboard_structure",
        "test_ops_compose.py::test_grafana_provisioning_points_at_the_mounted_dashboard",
    ],
}


def compose_schema() -> dict[str, Any]:
    """The Compose specification schema shipped by check-jsonschema."""
    vendor = resources.files("check_jsonschema.builtin_schemas.vendor")
    schema: dict[str, Any] = json.loads((vendor / "compose-spec.json").read_text(encoding="utf-8"))
    assert schema["title"] == "Compose Specification"
    return schema


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Validation errors of ``doc`` against the Compose schema (with format checks)."""
    schema = compose_schema()
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


def test_compose_file_validates_against_the_compose_specification() -> None:
    """compose.yaml is valid under the official Compose JSON schema."""
    assert schema_errors(compose()) == []


def test_schema_check_rejects_a_misspelled_key() -> None:
    """Negative control: the same check rejects a service key Compose does not know."""
    doc = copy.deepcopy(compose())
    doc["services"]["redis"]["restart_policy"] = "always"
    assert any("restart_policy" in error for error in schema_errors(doc))


def test_every_service_is_covered_by_a_test_that_runs_its_command() -> None:
    """Each compose service maps to existing tests that run (or check) what it runs."""
    assert set(compose()["services"]) == set(COVERAGE)
    for tests in COVERAGE.values():
        for node in tests:
            module, _, name = node.partition("::")
            source = (Path(__file__).parent / module).read_text(encoding="utf-8")
            assert re.search(rf"^def {name}\(", source, flags=re.MULTILINE), node


def test_long_running_services_restart_and_have_healthchecks() -> None:
    """Every service but the one-shot job restarts on its own and has a health check."""
    for name, spec in compose()["services"].items():
        if name in ONE_SHOT:
            assert spec["restart"] == "no", name
            continue
        assert spec.get("restart") in ("always", "unless-stopped", "on-failure"), name
        assert spec.get("healthcheck", {}).get("test"), name


def test_secrets_come_only_from_the_env_files() -> None:
    """No secret value in compose.yaml: no `environment:`, every service reads the env files."""
    doc = compose()
    for name, spec in doc["services"].items():
        assert "environment" not in spec, name
        if name in BROKER_ONLY:
            assert spec.get("env_file") == ["ops/broker.env"], name
        elif "build" in spec:
            assert spec.get("env_file") == ["ops/broker.env", "ops/evalq.env"], name
        elif name in ("postgres", "grafana"):
            assert spec.get("env_file") == ["ops/evalq.env"], name
    text = (ROOT / "compose.yaml").read_text(encoding="utf-8")
    for key, value in env_example().items():
        if SECRET_NAME.search(key):
            assert "CHANGE_ME" in value, key
            assert value not in text, key


def test_flower_and_the_exporter_get_no_judge_key_and_no_database_password() -> None:
    """Flower and the queue exporter receive ops/broker.env alone: the broker URL, nothing more."""
    services = compose()["services"]
    for name in ("flower", "queue-exporter"):
        received: dict[str, str] = {}
        for path in services[name]["env_file"]:
            received |= env_file(Path(path).name + ".example")
        assert "EVALQ_BROKER_URL" in received, name
        leaked = {"EVALQ_JUDGE_API_KEY", "POSTGRES_PASSWORD", "EVALQ_STORE_URL"} & set(received)
        assert leaked == set(), (name, leaked)


def test_required_variables_are_guarded_and_documented() -> None:
    """Every `${VAR:?...}` guard in compose names a variable of the example env file."""
    text = (ROOT / "compose.yaml").read_text(encoding="utf-8")
    guarded = set(re.findall(r"\$\$\{(\w+):\?", text))
    assert {"REDIS_PASSWORD", "FLOWER_BASIC_AUTH"} <= guarded
    assert guarded <= set(env_example())


def test_real_env_files_are_git_ignored() -> None:
    """The env files with real secrets (ops/broker.env, ops/evalq.env) are ignored, not examples."""
    for name in ("broker.env", "evalq.env"):
        ignored = subprocess.run(
            ["git", "check-ignore", "-q", f"ops/{name}"], cwd=ROOT, check=False, timeout=30
        )
        example = subprocess.run(
            ["git", "check-ignore", "-q", f"ops/{name}.example"], cwd=ROOT, check=False, timeout=30
        )
        assert (ignored.returncode, example.returncode) == (0, 1), name


def test_published_ports_bind_loopback_only() -> None:
    """Every published port is bound to 127.0.0.1 (Flower's /metrics is unauthenticated)."""
    for name, spec in compose()["services"].items():
        for port in spec.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


def example_settings(**overrides: str) -> Any:
    """Settings as a worker container would load them from the example env file."""
    env = {k.removeprefix("EVALQ_").lower(): v for k, v in env_example().items()}
    fields = type(load_settings()).model_fields
    return load_settings(**({k: v for k, v in env.items() if k in fields} | overrides))


def test_example_env_file_is_a_valid_worker_configuration() -> None:
    """The example env file loads into Settings: System One judge, thresholds, budget."""
    settings = example_settings()
    assert settings.judge.value == "systemone"
    assert settings.thresholds == (0.2, 0.8)
    assert settings.broker_url.startswith("redis://")
    assert settings.store_url.startswith("postgresql://")


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", duration)
    assert match, duration
    return float(match[1]) * (60 if match[2] == "m" else 1)


def test_worker_grace_period_exceeds_celery_soft_shutdown() -> None:
    """Docker's stop_grace_period outlasts worker_soft_shutdown_timeout of each pool's settings."""
    for name, spec in compose()["services"].items():
        argv = service(name).argv
        if argv[:2] != ["evalq", "worker"]:
            continue
        concurrency = argv[argv.index("--concurrency") + 1]
        settings = example_settings(concurrency=concurrency)
        soft_s = celery_config(settings, settings.broker_url)["worker_soft_shutdown_timeout"]
        assert _seconds(spec["stop_grace_period"]) > soft_s + 5, name


def cli_accepts(args: list[str]) -> None:
    """``evalq ARGS --help`` succeeds in the real CLI (click checks every option name first)."""
    result = CliRunner().invoke(cli.app, [*args, "--help"])
    assert result.exit_code == 0, (args, result.output)


def test_evalq_console_script_is_installed() -> None:
    """The image's ENTRYPOINT `evalq` is an installed console script that starts."""
    result = subprocess.run(
        [str(BIN / "evalq"), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "worker" in result.stdout


def test_evalq_commands_exist_with_their_flags() -> None:
    """Each `evalq ...` argv of compose is accepted by the CLI with exactly its flags."""
    seen = set()
    for name, spec in compose()["services"].items():
        argv = service(name).argv
        if argv[:1] != ["evalq"]:
            continue
        assert "build" in spec, name
        seen.add(argv[1])
        cli_accepts(argv[1:])
        if "--lanes" in argv:
            load_settings(lanes=argv[argv.index("--lanes") + 1])  # lane names are valid
    assert seen >= {"worker", "enqueue"}


def test_cli_check_rejects_an_unknown_flag() -> None:
    """Negative control: the same check fails for a flag the CLI does not have."""
    with pytest.raises(AssertionError):
        cli_accepts(["worker", "--no-such-flag", "1"])


def test_one_shot_job_input_exists() -> None:
    """The one-shot producer's input file is in the repo (and in the image via the Dockerfile)."""
    argv = service("backfill-examples").argv
    path = ROOT / argv[-1]
    files = [path] if path.is_file() else sorted(path.glob("*"))
    assert files, path
    assert all(f.stat().st_size > 0 for f in files)
    dockerfile = (ROOT / "ops" / "Dockerfile").read_text(encoding="utf-8")
    assert "COPY --chown=root:root examples ./examples" in dockerfile


def test_worker_healthcheck_command_of_compose() -> None:
    """The workers' healthcheck passes against a metrics exporter and fails without one."""
    check = service("worker-live").healthcheck
    assert check is not None
    exporter = metrics.start_exporter(0, "127.0.0.1")
    metrics.default_metrics()  # the worker creates its metrics at start
    try:
        argv = localize(check, {"9808": str(exporter.port)})
        argv[0] = str(BIN / "python")
        assert run_check(argv) == 0
    finally:
        exporter.stop()
    assert run_check(argv) == 1


@pytest.mark.services
def test_postgres_healthcheck_command_of_compose(postgres_url: str) -> None:
    """compose's pg_isready healthcheck passes against a running PostgreSQL."""
    check = service("postgres").healthcheck
    assert check is not None
    host = postgres_url.split("@", 1)[1].split("/", 1)[0]
    hostname, _, port = host.partition(":")
    env = child_env({"POSTGRES_USER": "postgres", "POSTGRES_DB": "postgres"})
    env |= {"PGHOST": hostname, "PGPORT": port or "5432"}
    assert run_check(check, env) == 0
    env["PGPORT"] = str(free_port())
    assert run_check(check, env) != 0


def test_judge_command_serves_the_configured_workers(tmp_path: Path) -> None:
    """compose's judge command answers the judge the example env configures; GET is refused."""
    port = str(free_port())
    spec = service("judge")
    argv = localize(spec.argv, {"--host=0.0.0.0": "--host=127.0.0.1", "8080": port})
    argv[0] = str(BIN / "python")
    key = env_example()["EVALQ_JUDGE_API_KEY"]
    process = started(argv, child_env({"EVALQ_JUDGE_API_KEY": key}), tmp_path / "judge.log")
    try:
        check = localize(spec.healthcheck or [], {"8080": port})
        check[0] = str(BIN / "python")
        ok = lambda: run_check(check) == 0  # noqa: E731
        wait_until(ok, 30, "judge healthcheck")
        assert get(f"http://127.0.0.1:{port}/v1/systemone")[0] == 405  # POST only, no key
        judge = _build_judge(example_settings(judge_url=f"http://127.0.0.1:{port}"))
        assert isinstance(judge, SystemOneJudge)
        request = JudgeRequest(state={"a": 1}, questions={"q": NoulQuestion(instructions="ok?")})

        async def ask() -> Any:
            try:
                with use_deadline(time.monotonic() + 20):
                    return await judge(request)
            finally:
                await judge.aclose()

        response = asyncio.run(ask())
        assert set(response.answers) == {"q"}
    finally:
        stop(process)


def test_grafana_provisioning_points_at_the_mounted_dashboard() -> None:
    """Grafana's dashboard provider path is where compose mounts dashboard-evalq.json."""
    provider = yaml.safe_load(
        (ROOT / "ops/grafana/provisioning/dashboards/evalq.yml").read_text(encoding="utf-8")
    )
    path = provider["providers"][0]["options"]["path"]
    mounts = [v.split(":")[1] for v in compose()["services"]["grafana"]["volumes"]]
    assert any(m.startswith(path + "/") and m.endswith(".json") for m in mounts)
    assert (
        "./ops/grafana/provisioning:/etc/grafana/provisioning:ro"
        in (compose()["services"]["grafana"]["volumes"])
    )


def _runbook_commands() -> list[str]:
    """Shell lines of the RUNBOOK's fenced code blocks (continuations joined)."""
    text = (ROOT / "ops" / "RUNBOOK.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)
    joined = "\n".join(block.replace("\\\n", " ") for block in blocks)
    return [line.strip() for line in joined.splitlines() if line.strip()]


def test_runbook_evalq_commands_exist() -> None:
    """Every `docker compose run --rm evalq ...` in the RUNBOOK is a valid CLI invocation."""
    prefix = "docker compose run --rm evalq "
    commands = [line.removeprefix(prefix).split("#")[0].split() for line in _runbook_commands()]
    commands = [
        c for c, line in zip(commands, _runbook_commands(), strict=True) if line.startswith(prefix)
    ]
    assert len(commands) >= 3
    for args in commands:
        cli_accepts(args)


def test_runbook_names_only_existing_services() -> None:
    """Every service a RUNBOOK `docker compose` command names exists in compose.yaml."""
    services = set(compose()["services"])
    verbs = r"(?:stop|start|restart|ps|logs|exec|up|run)"
    named: set[str] = set()
    for line in _runbook_commands():
        match = re.match(rf"docker compose ({verbs})\b(.*)", line)
        if match:
            command = re.split(r"[#|]", match[2])[0]
            words = [w for w in command.split() if not w.startswith("-")]
            names = [w.split("=")[0] for w in words if re.fullmatch(r"[a-z][a-z-]+(=\d+)?", w)]
            # exec/run: the first word is the service, the rest is the command it runs
            named |= set(names[:1] if match[1] in ("exec", "run") else names)
    assert named
    assert named <= services, named - services
