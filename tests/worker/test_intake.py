"""The intake: live messages first, bounded chunks per loop iteration, every message settled;
live messages on a runtime of their own when other lanes share the process."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from kombu import Message

from producer.snapshot import EVALUATE_TASK, LANE_QUEUES, Lane
from worker.consumer import DRAIN_CHUNK, Intake, Intakes
from worker.handling import Delivery, Handler, Verdict
from worker.judges import SyntheticJudge
from worker.runtime import Runtime
from worker.settings import load_settings
from worker.store import open_store


class RecordingHandler(Handler):
    """A handler that records each micro-batch it is given and acks it at once."""

    def __init__(self, rt: Runtime) -> None:
        super().__init__(rt)
        self.batches: list[list[Lane | None]] = []
        self.threads: set[int] = set()

    def submit(self, deliveries: Sequence[Delivery]) -> list[asyncio.Future[Verdict]]:
        self.batches.append([d.lane for d in deliveries])
        self.threads.add(threading.get_ident())
        futures = [self.rt.loop.create_future() for _ in deliveries]
        for future in futures:
            future.set_result(Verdict.ACK)
        return futures


def _message(lane: Lane) -> Message:
    return Message(
        body=json.dumps([[{"n": 1}], {}, {}]),
        headers={"task": EVALUATE_TASK, "id": "t"},
        content_type="application/json",
        content_encoding="utf-8",
        delivery_info={"routing_key": LANE_QUEUES[lane]},
    )


def test_live_messages_go_first_and_chunks_stay_bounded(tmp_path: Path) -> None:
    """40 backfill then 1 live: the live one is in the first chunk, chunks within DRAIN_CHUNK."""
    with open_store(f"sqlite:///{tmp_path / 'x.db'}") as store:
        rt = Runtime(load_settings(processes=1), store=store, judge=SyntheticJudge())
        try:
            handler = RecordingHandler(rt)
            intake = Intake(handler, SimpleNamespace(event_dispatcher=None, hub=None))

            async def arrive() -> None:  # on the loop: nothing drains until all have arrived
                for _ in range(40):
                    intake.put(_message(Lane.BACKFILL))
                intake.put(_message(Lane.LIVE))

            rt.call(arrive())
            assert rt.call(intake.settled(10.0)) is True
        finally:
            rt.close()
    assert handler.batches[0][0] is Lane.LIVE
    assert max(len(batch) for batch in handler.batches) <= DRAIN_CHUNK
    assert sum(len(batch) for batch in handler.batches) == 41
    assert intake.in_flight == 0


def test_intakes_route_live_to_its_own_runtime(tmp_path: Path) -> None:
    """Live messages are handled on the live runtime's loop thread, other lanes on the other's."""
    consumer = SimpleNamespace(event_dispatcher=None, hub=None)
    with open_store(f"sqlite:///{tmp_path / 'x.db'}") as store:
        settings = load_settings(processes=1)
        runtimes = [Runtime(settings, store=store, judge=SyntheticJudge()) for _ in range(2)]
        try:
            live, other = (RecordingHandler(rt) for rt in runtimes)
            intakes = Intakes(Intake(other, consumer), Intake(live, consumer))
            for lane in (Lane.BACKFILL, Lane.LIVE, Lane.OUTCOMES, Lane.LIVE):
                intakes.put(_message(lane))
            assert intakes.wait_settled(10.0) is True
        finally:
            for rt in runtimes:
                rt.close()
    assert [lane for batch in live.batches for lane in batch] == [Lane.LIVE, Lane.LIVE]
    assert sorted(lane for batch in other.batches for lane in batch if lane) == [
        Lane.BACKFILL,
        Lane.OUTCOMES,
    ]
    assert live.threads.isdisjoint(other.threads)
    assert intakes.in_flight == 0
