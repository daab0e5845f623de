"""``evalq ui``: a read-only result browser over the store (Starlette + Jinja2, served by uvicorn).

Pages: the overview (the report's numbers per metric, with filters: time range, slice,
metric-set version, backfill), one metric's results by status / reason / verdict (keyset pages,
newest first) and one record (trace, unit, window and cutoff, results with their answer
distribution and question ids, the evidence window when its content is kept, usage, linked
outcomes, the snapshot's other evaluations). Nothing is written; no page reads every record.

Access: ``EVALQ_UI_TOKEN`` protects every page (a login form sets a session cookie, or send
``Authorization: Bearer``); it is required unless the server is bound to a loopback address.
Needs the ``ui`` extra (``pip install 'evalq[ui]'``).
"""

from __future__ import annotations

from ._access import MIN_TOKEN_CHARS, TOKEN_SETTING, Access, UiConfigError, is_loopback
from ._app import create_app
from ._pages import metric_report
from ._serve import serve

__all__ = [
    "MIN_TOKEN_CHARS",
    "TOKEN_SETTING",
    "Access",
    "UiConfigError",
    "create_app",
    "is_loopback",
    "metric_report",
    "serve",
]
