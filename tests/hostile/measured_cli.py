"""Run ``evalq`` and, at exit, write the process's peak resident memory (VmHWM, KiB) to a file.

Usage: ``python -m tests.hostile.measured_cli HWM_FILE ARGS...``. ``wait4``'s ``ru_maxrss``
would count the parent's memory at fork time; VmHWM is the peak of this program's own memory.
"""

from __future__ import annotations

import atexit
import runpy
import sys
from pathlib import Path


def _write_peak(target: Path) -> None:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            target.write_text(line.split()[1])


def main() -> None:
    """Register the peak-memory report, then run the CLI with the remaining arguments."""
    target = Path(sys.argv[1])
    atexit.register(_write_peak, target)
    sys.argv = ["evalq", *sys.argv[2:]]
    runpy.run_module("worker.cli", run_name="__main__")


if __name__ == "__main__":
    main()
