"""The negative control of the kill tests: the worker app acking each message as it ARRIVES.

``celery -A tests.faults.early_ack_app worker ...`` runs the real consumer, handler, store and
judge, but the broker message is acknowledged when the consumer takes it, before it is evaluated.
A SIGKILL then loses every evaluation that was running, which is what the control must show: the
kill test can tell loss from no loss.
"""

from __future__ import annotations

from typing import Any

from kombu.message import Message

from worker.app import create_app
from worker.consumer import EvalqConsumer

__all__ = ["EarlyAckConsumer", "app"]


class EarlyAckConsumer(EvalqConsumer):
    """evalq's consumer with the ack moved to the moment a message arrives (the fault)."""

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Any:
        """Ack first, then hand the message over as usual."""
        put = super().create_task_handler(*args, **kwargs)

        def early_ack(message: Message) -> None:
            message.ack()
            put(message)

        return early_ack


app = create_app()
app.conf.update(worker_consumer="tests.faults.early_ack_app:EarlyAckConsumer")
