"""The negative control of the kill tests: the worker app with ``acks_late`` switched OFF.

``celery -A tests.faults.early_ack_app worker ...`` runs the real tasks, store and judge, but the
broker message is acknowledged when a task *starts*. A SIGKILL then loses every evaluation that
was running, which is what the control must show: the kill test can tell loss from no loss.
"""

from __future__ import annotations

from producer.snapshot import EVALUATE_TASK, OUTCOME_TASK
from worker import signals
from worker.app import create_app

__all__ = ["app"]

app = create_app()
app.conf.update(task_acks_late=False, task_reject_on_worker_lost=False)
for _name in (EVALUATE_TASK, OUTCOME_TASK):
    app.tasks[_name].acks_late = False
    app.tasks[_name].reject_on_worker_lost = False
signals.connect(app)
