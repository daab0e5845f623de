"""``evalq run``'s signal handling in-process: a Ctrl-C that a finalizer swallowed is not lost."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator

import pytest

from worker.cli._run import _Interrupted, _Interruption


@pytest.fixture
def handlers() -> Iterator[None]:
    """The process's SIGINT/SIGTERM handlers restored after the test."""
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


class _SignalsWhenCollected:
    """Sends ``signum`` to this process from ``__del__`` (as a GC finalizer would meet it)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def __del__(self) -> None:
        os.kill(os.getpid(), self.signum)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_swallowed_by_a_finalizer_is_raised_by_the_next_check(
    handlers: None, signum: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exception a __del__ ignored comes again from check(), with the signal's number."""
    ignored: list[type[BaseException] | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda raised: ignored.append(raised.exc_type))
    interruption = _Interruption.install()
    _SignalsWhenCollected(signum)  # collected at once: the handler raises inside __del__
    assert ignored == [_Interrupted]  # Python swallowed it, as it does in redis-py's pool
    with pytest.raises(_Interrupted) as raised:
        interruption.check()
    assert raised.value.signum == signum


def test_check_without_a_signal_does_nothing(handlers: None) -> None:
    """No signal received: check() returns and the run goes on."""
    interruption = _Interruption.install()
    interruption.check()
    assert interruption.signum is None
