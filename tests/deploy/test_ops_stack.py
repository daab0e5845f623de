"""The compose stack without Docker: the same commands as compose.yaml, run locally, end to end.

Redis (compose's command and ops/redis.conf, password required), PostgreSQL (the test database),
the synthetic System One judge, the three worker pools, Flower with basic auth and the one-shot
producer job, configured from ops/evalq.env.example with only addresses and ports changed.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis

from tests.deploy.ops_kit import (
    BIN,
    OPS,
    ROOT,
    child_env,
    env_example,
    flower,
    get,
    localize,
    quick_redis,
    run_check,
    service,
    started,
    stop,
    wait_until,
)
from worker.embedded import free_port, redis_executable

pytestmark = pytest.mark.services

PASSWORD = "s3cret-stack"
WORKERS = ("worker-live", "worker-backfill", "outcomes")


def _redis(stack: ExitStack, tmp: Path) -> str:
    """compose's Redis command on a free port; returns the broker URL (with password)."""
    port, data = free_port(), tmp / "redis"
    data.mkdir()
    conf = f"{OPS / 'redis.conf'} --dir {data} --port {port} --bind 127.0.0.1"
    argv = localize(
        service("redis").argv,
        {"redis-server ": f"{redis_executable()} ", "/usr/local/etc/redis/redis.conf": conf},
    )
    process = started(argv, child_env({"REDIS_PASSWORD": PASSWORD}), tmp / "redis.log")
    stack.callback(stop, process)
    url = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    client = quick_redis(url)
    stack.callback(client.close)
    wait_until(lambda: _pings(client), 15, "redis")
    return url


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def _judge(stack: ExitStack, tmp: Path, key: str) -> str:
    """compose's judge command on a free port; returns its base URL."""
    port = str(free_port())
    spec = service("judge")
    argv = localize(spec.argv, {"--host=0.0.0.0": "--host=127.0.0.1", "8080": port})
    argv[0] = str(BIN / "python")
    process = started(argv, child_env({"EVALQ_JUDGE_API_KEY": key}), tmp / "judge.log")
    stack.callback(stop, process)
    check = localize(spec.healthcheck or [], {"8080": port})
    check[0] = str(BIN / "python")
    wait_until(lambda: run_check(check) == 0, 30, "judge")
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def stack_env(postgres_url: str, tmp_path: Path) -> Iterator[tuple[dict[str, str], ExitStack]]:
    """The example env file with local addresses; Redis and the judge already running."""
    with ExitStack() as stack:
        env = dict(env_example())
        env["EVALQ_BROKER_URL"] = _redis(stack, tmp_path)
        env["EVALQ_STORE_URL"] = postgres_url
        env["EVALQ_JUDGE_URL"] = _judge(stack, tmp_path, env["EVALQ_JUDGE_API_KEY"])
        env["EVALQ_METRICS_ADDR"] = "127.0.0.1"
        yield env, stack


def _report(env: dict[str, str]) -> dict[str, object]:
    result = subprocess.run(
        [str(BIN / "evalq"), "report", "--json"],
        env=child_env(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data: dict[str, object] = json.loads(result.stdout)
    return data


def _scrape(port: int) -> str:
    """A worker's /metrics (started by the worker from EVALQ_METRICS_PORT/EVALQ_METRICS_ADDR)."""
    try:
        status, body = get(f"http://127.0.0.1:{port}/metrics")
    except OSError as exc:
        raise AssertionError(f"worker exporter not serving on EVALQ_METRICS_PORT={port}") from exc
    assert status == 200
    return body


def test_compose_stack_runs_end_to_end(
    stack_env: tuple[dict[str, str], ExitStack], tmp_path: Path
) -> None:
    """Workers per lane evaluate the one-shot job's traces; Flower (auth) lists evalq's tasks."""
    env, stack = stack_env
    ports: dict[str, int] = {}
    workers = []
    for name in WORKERS:
        ports[name] = free_port()
        worker_env = child_env({**env, "EVALQ_METRICS_PORT": str(ports[name])})
        argv = [str(BIN / "evalq"), *service(name).argv[1:]]
        workers.append(started(argv, worker_env, tmp_path / f"{name}.log"))
        stack.callback(stop, workers[-1], 60)
    user, _, password = env["FLOWER_BASIC_AUTH"].partition(":")
    flower_url, _ = stack.enter_context(
        flower(env["EVALQ_BROKER_URL"], tmp_path / "flower.log", user=user, password=password)
    )

    job = service("backfill-examples").argv
    enqueue = subprocess.run(
        [str(BIN / "evalq"), *job[1:]],
        cwd=ROOT,
        env=child_env(env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert enqueue.returncode == 0, enqueue.stdout + enqueue.stderr
    lines = (ROOT / job[-1]).read_text(encoding="utf-8").splitlines()
    expected = len([line for line in lines if line.strip()])

    wait_until(lambda: _report(env)["evaluations"] == expected, 120, "evaluations", 1.0)

    assert get(flower_url + "/api/tasks")[0] == 401
    needle = 'task="evalq.evaluate",type="task-succeeded"'
    listed = lambda: needle in get(flower_url + "/metrics")[1].replace(" ", "")  # noqa: E731
    wait_until(listed, 30, "flower metrics listing evalq.evaluate")
    status, tasks = get(flower_url + "/api/tasks", auth=(user, password))
    assert status == 200
    assert "evalq.evaluate" in tasks

    backfill = _scrape(ports["worker-backfill"])
    assert 'evalq_evaluations_total{lane="backfill",outcome="ok"}' in backfill
    assert "evalq_judge_requests_total" in backfill

    for name, process in zip(WORKERS, workers, strict=True):
        stop(process, timeout_s=60)
        assert process.returncode == 0, (name, (tmp_path / f"{name}.log").read_text()[-2000:])
