"""Judges: the System One (Jev) wire client, a strict Chat-Completions backend, a synthetic judge.

A pure library: no Celery, no store, no settings; everything is passed in. Keys are given by the
caller (the worker reads them from its own environment) and never appear in exceptions.

Exception tree (foreign httpx exceptions are translated once, in the HTTP judges)::

    Exception
     ├── JudgeError        no usable reply: .status (None = transport), .retryable
     │                     transient: connect/read errors, timeouts, 408/429/529/5xx
     │                     permanent: other 4xx, malformed URL
     └── InvalidReply      a reply arrived but is unusable: .model, .usage kept for accounting
                           (a 2xx body past ``max_reply_bytes`` decoded, gzip/deflate included)
    ValueError
     └── InvalidResponse   a response breaks a validation rule (message = rule code)
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._deadline import remaining_s, use_deadline
from ._errors import InvalidReply, JudgeError
from ._protocol import Judge, check_async_judge, validates_replies
from ._retry import RetryPolicy
from ._synthetic import SyntheticJudge
from ._validation import InvalidResponse, validate_response
from ._wire import (
    Answer,
    ChoiceAnswer,
    ChoiceQuestion,
    JudgeRequest,
    JudgeResponse,
    NoulAnswer,
    NoulQuestion,
    Question,
    ScoreAnswer,
    ScoreQuestion,
    Usage,
)

if TYPE_CHECKING:
    from ._chat import ChatJudge
    from ._endpoint import check_base_url
    from ._systemone import SystemOneJudge
    from ._transport import DEFAULT_MAX_REPLY_BYTES

__all__ = [
    "DEFAULT_MAX_REPLY_BYTES",
    "Answer",
    "ChatJudge",
    "ChoiceAnswer",
    "ChoiceQuestion",
    "InvalidReply",
    "InvalidResponse",
    "Judge",
    "JudgeError",
    "JudgeRequest",
    "JudgeResponse",
    "NoulAnswer",
    "NoulQuestion",
    "Question",
    "RetryPolicy",
    "ScoreAnswer",
    "ScoreQuestion",
    "SyntheticJudge",
    "SystemOneJudge",
    "Usage",
    "check_async_judge",
    "check_base_url",
    "remaining_s",
    "use_deadline",
    "validate_response",
    "validates_replies",
]

# The HTTP judges (httpx, aiohttp) load on first use: the engine imports this package for the
# wire types and protocols only, and must stay importable without an HTTP client.
_LAZY = {
    "ChatJudge": "._chat",
    "DEFAULT_MAX_REPLY_BYTES": "._transport",
    "SystemOneJudge": "._systemone",
    "check_base_url": "._endpoint",
}


def __getattr__(name: str) -> Any:
    """A lazily exported name (:data:`_LAZY`), imported and kept on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
