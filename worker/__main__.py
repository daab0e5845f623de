"""``python -m worker [--hostname NAME]``: a worker configured from ``EVALQ_*`` (what ``evalq
worker`` runs; a multi-process worker's supervisor runs one of these per consumer process)."""

from __future__ import annotations

import argparse
import sys

from worker.running import run_worker
from worker.settings import ConfigError, load_settings

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Validate the configuration (naming any bad variable), then serve until stopped."""
    parser = argparse.ArgumentParser(prog="python -m worker")
    parser.add_argument("--hostname", default=None, help="Celery node name")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        settings.require_broker()
        return run_worker(settings, hostname=args.hostname)
    except ConfigError as exc:
        sys.stderr.write(f"evalq worker: invalid configuration: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
