"""Log redaction: worker logs carry reason codes and exception *types*, never their text.

:class:`RedactingFilter` strips exception text and tracebacks from every record (they could
quote snapshot content, keys or model output). The worker's lifecycle bootstep installs it on
the root logger and its handlers when a worker process starts.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["RedactingFilter", "install_redaction"]


class RedactingFilter(logging.Filter):
    """Drop exception text and tracebacks from log records; keep the exception type name."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite ``record`` in place; never suppresses it."""
        if record.exc_info and record.exc_info[0] is not None:
            record.msg = f"{record.msg} [{record.exc_info[0].__name__}]"
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True


def install_redaction(logger: logging.Logger | None = None, **_: Any) -> None:
    """Add :class:`RedactingFilter` to ``logger`` (default: the root) and its handlers, once."""
    target = logger or logging.getLogger()
    if not any(isinstance(f, RedactingFilter) for f in target.filters):
        target.addFilter(RedactingFilter())
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
