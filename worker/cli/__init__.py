"""``evalq``: the command line, a face over ``producer`` and the worker.

One module per command (``_worker``, ``_enqueue``, ``_backfill``, ``_outcome``, ``_redrive``,
``_retry``, ``_report`` with ``_gates``, ``_results``, ``_show``, ``_status``, ``_run``, ``_store``,
``_config``, ``_purge``, ``_queue_exporter``, ``_ui``); what they share — settings, the store,
the broker and one-line failures — is in ``_common`` and ``_options``. To add a command, write
its function in a module of its own and register it on :data:`app` below.

Every flag has an environment twin: flags that are settings read ``EVALQ_<NAME>`` through
``worker.settings.Settings`` (the flag wins); command-only flags name their variable in
``--help``. Invalid configuration exits with status 2 and a message naming the variable.
"""

from __future__ import annotations

from . import (
    _backfill,
    _config,
    _enqueue,
    _outcome,
    _purge,
    _queue_exporter,
    _redrive,
    _report,
    _results,
    _retry,
    _run,
    _show,
    _status,
    _store,
    _ui,
    _worker,
)
from ._app import app

__all__ = ["app", "main"]

# The order of --help.
app.command()(_worker.worker)
app.command(epilog=_enqueue.EPILOG)(_enqueue.enqueue)
app.command(epilog=_backfill.EPILOG)(_backfill.backfill)
app.command(epilog=_outcome.EPILOG)(_outcome.outcome)
app.command()(_redrive.redrive)
app.command(epilog=_retry.EPILOG)(_retry.retry)
app.command()(_report.report)
app.command(epilog=_results.EPILOG)(_results.results)
app.command(epilog=_show.EPILOG)(_show.show)
app.command()(_status.status)
app.command(epilog=_run.EPILOG)(_run.run)
app.add_typer(_store.store_app, name="store")
app.add_typer(_config.config_app, name="config")
app.command()(_purge.purge)
app.command("queue-exporter")(_queue_exporter.queue_exporter)
app.command(epilog=_ui.EPILOG)(_ui.ui)


def main() -> None:
    """Console-script entry point (``evalq``)."""
    app()
