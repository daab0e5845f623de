"""What a producer knows of its broker: whether it confirms publishes, and what its failures mean.

kombu, py-amqp and redis-py each raise their own exceptions from a broker call (kombu's
``OperationalError``, py-amqp's ``ChannelError``, redis-py's ``ConnectionError``, ``OSError``
from a socket). A caller of :class:`~producer.Producer` sees one type instead:
:class:`BrokerError`, whose ``.code`` (:class:`BrokerFailure`) says what went wrong and whose
``__cause__`` is the library's exception. The translation is :meth:`Broker.translating`, and it
wraps the producer's broker calls only (acquiring a connection, publishing, waiting for confirms,
flushing a pipeline, reading a queue's depth), never the caller's input: a file error raised
while a backfill reads its input stays the ``OSError`` it is.

Every failure here is transient: the same send may succeed later (the broker is back, the queue
has room again, the lane queue was declared again). Messages carry the code and what was
affected, never the library's text (it may hold the broker URL and its password).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from amqp.exceptions import AMQPError, MessageNacked
from kombu import Connection
from kombu.exceptions import (  # type: ignore[attr-defined]  # BatchPublishError: not in the stubs
    BatchPublishError,
    KombuError,
    OperationalError,
    SerializationError,
)

__all__ = ["Broker", "BrokerError", "BrokerFailure", "UnroutableError"]


class BrokerFailure(StrEnum):
    """Why a broker call failed (each code defined here once)."""

    BROKER_UNREACHABLE = "BROKER_UNREACHABLE"
    """No connection, or it broke during the call (refused, reset, timed out)."""
    PUBLISH_REFUSED = "PUBLISH_REFUSED"
    """RabbitMQ nacked a publish (a queue at its length limit rejecting publishes)."""
    CONFIRM_TIMEOUT = "CONFIRM_TIMEOUT"
    """RabbitMQ did not confirm what was published within the wait's limit."""
    CONNECTION_REPLACED = "CONNECTION_REPLACED"
    """kombu replaced the connection twice during one call: what it sent is unknown."""
    UNROUTABLE = "UNROUTABLE"
    """RabbitMQ returned a message twice: its lane queue is missing even after declaring it."""
    BROKER_ERROR = "BROKER_ERROR"
    """Any other error the broker answered (access refused, Redis out of memory, ...)."""


class BrokerError(RuntimeError):
    """A broker call failed; trying it again may succeed. ``.code`` says why."""

    def __init__(self, code: BrokerFailure, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else str(code))
        self.code = code


class UnroutableError(BrokerError):
    """RabbitMQ returned a message twice: its lane queue is missing even after declaring it."""

    def __init__(self, queue: str) -> None:
        super().__init__(BrokerFailure.UNROUTABLE, f"queue {queue} after declaring it again")


@dataclass(frozen=True, slots=True)
class Broker:
    """One broker URL's traits: confirms (RabbitMQ) and the exception types of its transport.

    kombu's transports list their libraries' exceptions (``connection_errors``,
    ``channel_errors``); kombu itself re-raises many as ``OperationalError``, and a failed Redis
    pipeline as ``BatchPublishError`` from the library's error. A serializer's error is not the
    broker's (a ``send_raw`` payload that is not JSON): it passes through untranslated.
    """

    confirms: bool
    unreachable: tuple[type[BaseException], ...]
    failing: tuple[type[BaseException], ...]

    @classmethod
    def of(cls, broker_url: str) -> Broker:
        """The traits of ``broker_url``'s kombu transport (nothing is connected)."""
        transport = Connection(broker_url).transport
        ours: tuple[type[BaseException], ...] = (OperationalError, OSError)
        unreachable = (*ours, *_libraries(transport.connection_errors))
        others = (KombuError, AMQPError, MessageNacked, *_libraries(transport.channel_errors))
        return cls(transport.driver_type == "amqp", unreachable, (*unreachable, *others))

    def translated(self, exc: BaseException) -> BaseException:
        """The :class:`BrokerError` that ``exc`` means; ``exc`` itself if it is not the broker's."""
        if isinstance(exc, BrokerError | SerializationError) or not isinstance(exc, self.failing):
            return exc
        if isinstance(exc, BatchPublishError) and exc.__cause__ is not None:
            exc = exc.__cause__  # a Redis pipeline's flush: what failed is the cause
        if isinstance(exc, MessageNacked):
            return BrokerError(BrokerFailure.PUBLISH_REFUSED)
        if isinstance(exc, self.unreachable):
            return BrokerError(BrokerFailure.BROKER_UNREACHABLE, type(exc).__name__)
        return BrokerError(BrokerFailure.BROKER_ERROR, type(exc).__name__)

    @contextlib.contextmanager
    def translating(self) -> Iterator[None]:
        """Raise what a broker call inside raises as a :class:`BrokerError` (``from`` it)."""
        try:
            yield
        except Exception as exc:
            translated = self.translated(exc)
            if translated is exc:
                raise
            raise translated from exc


def _libraries(types: tuple[type[BaseException], ...]) -> tuple[type[BaseException], ...]:
    """``types`` without Python's own non-OS exceptions: kombu's Redis transport counts
    ``KeyError`` as a connection error (for its own retries), but here one is a bug."""
    return tuple(t for t in types if t.__module__ != "builtins" or issubclass(t, OSError))
