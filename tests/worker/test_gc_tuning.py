"""The worker process's cycle-collector setting (``runtime.tune_gc``)."""

from __future__ import annotations

import gc

from worker import runtime


def test_tune_gc_sets_gen0_keeps_older_ratios_and_freezes_startup() -> None:
    """tune_gc sets the gen-0 threshold, keeps CPython's older ratios, and freezes what exists."""
    before = gc.get_threshold()
    try:
        gc.unfreeze()
        runtime.tune_gc(runtime.GC_GEN0_THRESHOLD)
        assert gc.get_threshold() == (runtime.GC_GEN0_THRESHOLD, before[1], before[2])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
