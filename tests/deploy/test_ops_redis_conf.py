"""The broker Redis as compose runs it: ops/redis.conf + password from the env, AOF, noeviction."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.deploy.ops_kit import (
    OPS,
    child_env,
    localize,
    quick_redis,
    run_check,
    service,
    started,
    stop,
    wait_until,
)
from worker.embedded import free_port, redis_executable

PASSWORD = "s3cret-redis"


def _argv(port: int, data: Path) -> list[str]:
    """compose's redis command with the bundled binary, the repo's config and a local dir/port."""
    conf = f"{OPS / 'redis.conf'} --dir {data} --port {port} --bind 127.0.0.1"
    return localize(
        service("redis").argv,
        {"redis-server ": f"{redis_executable()} ", "/usr/local/etc/redis/redis.conf": conf},
    )


def _ping(port: int) -> bool:
    client = quick_redis(port=port, password=PASSWORD)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The compose Redis command running on a free port; yields (port, data dir)."""
    port, data = free_port(), tmp_path / "data"
    data.mkdir()
    process = started(
        _argv(port, data), child_env({"REDIS_PASSWORD": PASSWORD}), tmp_path / "r.log"
    )
    try:
        wait_until(lambda: _ping(port), 15, "redis from compose command")
        yield port, data
    finally:
        stop(process)


def test_redis_requires_the_password(broker: tuple[int, Path]) -> None:
    """Without the password every command is refused; with it the server answers."""
    port, _ = broker
    anonymous = quick_redis(port=port)
    with pytest.raises(redis.AuthenticationError):
        anonymous.lpush("evalq.live", "x")
    anonymous.close()
    assert _ping(port)


def test_redis_persists_with_aof_and_never_evicts(broker: tuple[int, Path]) -> None:
    """ops/redis.conf turns on AOF (everysec), noeviction and the memory limit."""
    port, _ = broker
    client = redis.Redis(port=port, password=PASSWORD, decode_responses=True)
    config = {
        key: client.config_get(key)[key]
        for key in ("appendonly", "appendfsync", "maxmemory-policy", "maxmemory", "save")
    }
    assert config == {
        "appendonly": "yes",
        "appendfsync": "everysec",
        "maxmemory-policy": "noeviction",
        "maxmemory": str(2 * 1024**3),
        "save": "",
    }
    assert client.info("persistence")["aof_enabled"] == 1
    client.close()


def test_queued_messages_survive_a_restart(tmp_path: Path) -> None:
    """A message queued before SIGTERM is still queued after the same command starts again."""
    port, data = free_port(), tmp_path / "data"
    data.mkdir()
    env = child_env({"REDIS_PASSWORD": PASSWORD})
    for round_ in range(2):
        process = started(_argv(port, data), env, tmp_path / f"r{round_}.log")
        try:
            wait_until(lambda: _ping(port), 15, "redis")
            client = redis.Redis(port=port, password=PASSWORD)
            if round_ == 0:
                client.lpush("evalq.backfill", b'{"body": "snapshot"}')
            else:
                assert client.lrange("evalq.backfill", 0, -1) == [b'{"body": "snapshot"}']
            client.close()
        finally:
            stop(process)


def test_redis_refuses_to_start_without_a_password(tmp_path: Path) -> None:
    """An empty REDIS_PASSWORD stops the command before redis-server starts without auth."""
    result = subprocess.run(
        _argv(free_port(), tmp_path),
        env=child_env({"REDIS_PASSWORD": ""}),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    assert "REDIS_PASSWORD must be set" in result.stderr


def test_redis_healthcheck_command_of_compose(broker: tuple[int, Path]) -> None:
    """compose's redis healthcheck passes with the env password and fails with a wrong one."""
    port, _ = broker
    cli = str(Path(redis_executable()).with_name("redis-cli"))
    check = localize(service("redis").healthcheck or [], {"redis-cli": f"{cli} -p {port}"})
    assert run_check(check, child_env({"REDIS_PASSWORD": PASSWORD})) == 0
    assert run_check(check, child_env({"REDIS_PASSWORD": "nope"})) != 0
