"""Flower as compose runs it: basic auth enforced, health and metrics endpoints, task events."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.ops_celery_app import PROBE_TASK, make_app
from tests.deploy.ops_kit import (
    BIN,
    child_env,
    flower,
    get,
    localize,
    run_check,
    service,
    started,
    stop,
    wait_until,
)

pytestmark = pytest.mark.services

USER, PASSWORD = "ops", "s3cret-flower"


@pytest.fixture
def flower_url(redis_url: str, tmp_path: Path) -> Iterator[str]:
    """Compose's Flower command, running against the test Redis."""
    with flower(redis_url, tmp_path / "flower.log", user=USER, password=PASSWORD) as (url, _):
        yield url


def test_flower_ui_and_api_refuse_requests_without_credentials(flower_url: str) -> None:
    """The UI and the REST API answer 401 without credentials and with a wrong password."""
    for path in ("/", "/workers", "/api/workers", "/api/tasks", "/api/queues/length"):
        assert get(flower_url + path)[0] == 401, path
        assert get(flower_url + path, auth=(USER, "wrong"))[0] == 401, path


def test_flower_answers_200_with_credentials(flower_url: str) -> None:
    """The same endpoints answer 200 with the credentials from FLOWER_BASIC_AUTH."""
    for path in ("/", "/api/workers", "/api/tasks"):
        assert get(flower_url + path, auth=(USER, PASSWORD))[0] == 200, path


def test_flower_metrics_and_healthcheck_are_open(flower_url: str) -> None:
    """Flower 2.2.0 serves /metrics and /healthcheck without auth."""
    # Why its port stays on loopback and Prometheus scrapes it without credentials; if an
    # upgrade protects /metrics, this fails and ops/prometheus/prometheus.yml needs basic_auth.
    status, body = get(flower_url + "/metrics")
    assert status == 200
    assert "# TYPE flower_events_total counter" in body
    assert get(flower_url + "/healthcheck") == (200, "OK")


def test_flower_healthcheck_command_of_compose(flower_url: str) -> None:
    """Compose's Flower healthcheck command exits 0 against a running Flower, 1 against none."""
    port = flower_url.rsplit(":", 1)[1]
    check = service("flower").healthcheck
    assert check is not None
    argv = localize(check, {"5555": port})
    argv[0] = str(BIN / "python") if argv[0] == "python" else argv[0]
    assert run_check(argv) == 0
    closed = localize(check, {"5555": "1"})
    closed[0] = argv[0]
    assert run_check(closed) == 1


def test_flower_refuses_to_start_without_basic_auth(redis_url: str, tmp_path: Path) -> None:
    """Without FLOWER_BASIC_AUTH the compose command exits non-zero instead of serving openly."""
    env = child_env({"EVALQ_BROKER_URL": redis_url})
    result = subprocess.run(
        service("flower").argv, env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode != 0
    assert "FLOWER_BASIC_AUTH must be set" in result.stderr


def _probe_worker(redis_url: str, log: Path) -> subprocess.Popen[bytes]:
    argv = [str(BIN / "celery"), "-A", "ops_celery_app", "worker", "--pool=solo"]
    argv += ["--concurrency=1", "--without-gossip", "--without-mingle", "-E", "-n", "probe@%h"]
    env = child_env({"OPS_BROKER_URL": redis_url, "PYTHONPATH": str(Path(__file__).parent)})
    return started(argv, env, log)


def test_flower_metrics_list_tasks_of_a_real_worker(
    redis_url: str, flower_url: str, tmp_path: Path
) -> None:
    """A real worker's task events reach Flower: /metrics counts the task by name, /api lists it."""
    worker = _probe_worker(redis_url, tmp_path / "worker.log")
    app = make_app(redis_url)
    needle = f'task="{PROBE_TASK}",type="task-succeeded"'
    try:

        def seen() -> bool:
            # Events are pub/sub: resend until Flower has subscribed and the worker has answered.
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-2000:]
            app.send_task(PROBE_TASK, args=(1,))
            return needle in get(flower_url + "/metrics")[1].replace(" ", "")

        wait_until(seen, 60, "flower_events_total for the probe task", interval_s=0.3)
        status, body = get(flower_url + "/api/tasks", auth=(USER, PASSWORD))
        assert status == 200
        assert PROBE_TASK in body
    finally:
        stop(worker)
