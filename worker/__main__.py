"""``python -m worker``: a worker configured from ``EVALQ_*`` (what ``evalq worker`` runs)."""

from __future__ import annotations

import sys

from worker.ops import run_worker
from worker.settings import ConfigError, load_settings

__all__ = ["main"]


def main() -> int:
    """Validate the configuration (naming any bad variable), then serve until stopped."""
    try:
        settings = load_settings()
        settings.require_broker()
        run_worker(settings)
    except ConfigError as exc:
        sys.stderr.write(f"evalq worker: invalid configuration: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
