"""System One endpoint URL normalization (docs/semantics.md §7.3, AgentScope rules)."""

from __future__ import annotations

import pytest

from tests.judges.judge_kit import NOUL
from worker.judges import SystemOneJudge
from worker.judges.testing import JudgeServer


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://h.example", "http://h.example/v1/systemone"),
        ("http://h.example/", "http://h.example/v1/systemone"),
        ("http://h.example//", "http://h.example/v1/systemone"),
        ("https://h.example/v1", "https://h.example/v1/systemone"),
        ("https://h.example/v1/", "https://h.example/v1/systemone"),
        ("https://h.example/v1/systemone", "https://h.example/v1/systemone"),
        ("https://h.example/v1/systemone/", "https://h.example/v1/systemone"),
        ("http://h.example:8080/proxy", "http://h.example:8080/proxy/v1/systemone"),
        ("http://h.example/proxy/v1", "http://h.example/proxy/v1/systemone"),
        ("http://h.example/v2", "http://h.example/v2/v1/systemone"),
        ("http://127.0.0.1:9", "http://127.0.0.1:9/v1/systemone"),
    ],
)
def test_normalization(base: str, url: str) -> None:
    """Trailing / trimmed; …/v1/systemone kept; …/v1 gets /systemone; else /v1/systemone."""
    assert SystemOneJudge(base, api_key="k").url == url


def test_default_base_url() -> None:
    """The default endpoint is https://api.typesafe.ai/v1/systemone."""
    assert SystemOneJudge(api_key="k").url == "https://api.typesafe.ai/v1/systemone"


@pytest.mark.parametrize(
    "base",
    [
        "api.typesafe.ai",
        "/v1/systemone",
        "ftp://h.example",
        "http://",
        "http:///v1",
        "",
        "http://h.example/?x=1",
        "http://h.example/#frag",
        "http://user:pw@h.example",
        "http://h.example:notaport",
    ],
)
def test_invalid_base_rejected(base: str) -> None:
    """Anything but an absolute http(s) URL with a host (nothing to append to) is a ValueError."""
    with pytest.raises(ValueError, match="base_url"):
        SystemOneJudge(base, api_key="k")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("suffix", "path"),
    [
        ("", "/v1/systemone"),
        ("/", "/v1/systemone"),
        ("/v1", "/v1/systemone"),
        ("/v1/systemone/", "/v1/systemone"),
        ("/gateway", "/gateway/v1/systemone"),
    ],
)
async def test_requests_hit_the_normalized_path(
    server: JudgeServer, suffix: str, path: str
) -> None:
    """The judge actually POSTs to the normalized path on the server."""
    async with SystemOneJudge(server.base_url + suffix, api_key="k") as judge:
        await judge(NOUL)
    (logged,) = server.requests
    assert (logged.method, logged.path) == ("POST", path)
