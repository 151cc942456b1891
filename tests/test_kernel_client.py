"""The runner's kernel client: a message that arrived is read even when one long wait would miss its wake-up."""

from __future__ import annotations

import asyncio
import threading
import time
from queue import Empty

import pytest

from workbench.tools.book.kernel_client import ENGINE, SlicedPollEngine, poll_in_slices, register


class MissedWakeUp:
    """A channel like jupyter_client's async one, with the failure seen in lesson 10: a message is already queued, yet a
    wait with no deadline never returns. A poll with a deadline looks at the queue and finds it."""

    def __init__(self, queued: list[dict]) -> None:
        self.queued = queued
        self.calls: list[float | None] = []

    async def get_msg(self, timeout: float | None = None) -> dict:
        self.calls.append(timeout)
        if timeout is None:
            await asyncio.sleep(3600)  # the lost wake-up
        if self.queued:
            return self.queued.pop(0)
        await asyncio.sleep(timeout)
        raise Empty


def _run(coro, limit: float = 10.0):
    """Run ``coro`` on a fresh event loop in its own thread: the main thread may hold a loop that an earlier test's
    notebook client left marked as running, where ``asyncio.run`` refuses to start."""
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["value"] = asyncio.run(asyncio.wait_for(coro, limit))
        except BaseException as exc:  # handed to the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit + 5)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_a_waiting_message_is_read_though_the_long_wait_would_miss_it():
    channel = MissedWakeUp([{"msg_id": "reply"}])
    with pytest.raises(asyncio.TimeoutError):
        _run(channel.get_msg(timeout=None), limit=1.0)  # the bare channel hangs: the test's failure is real
    poll_in_slices(channel, slice_s=0.2)
    start = time.monotonic()
    assert _run(channel.get_msg(timeout=None)) == {"msg_id": "reply"}
    assert time.monotonic() - start < 1.0
    assert all(t is not None and t <= 0.2 for t in channel.calls[1:])  # never one unbounded wait


def test_a_deadline_still_ends_the_wait_and_a_late_message_is_still_read():
    channel = MissedWakeUp([])
    poll_in_slices(channel, slice_s=0.1)
    start = time.monotonic()
    with pytest.raises(Empty):
        _run(channel.get_msg(timeout=0.35))
    assert 0.3 <= time.monotonic() - start < 1.0  # about the deadline, not a slice early and not for ever

    async def arrives_later() -> dict:
        waiting = asyncio.ensure_future(channel.get_msg(timeout=None))
        await asyncio.sleep(0.3)
        channel.queued.append({"msg_id": "late"})
        return await waiting

    assert _run(arrives_later()) == {"msg_id": "late"}


def test_the_runner_registers_its_engine_with_papermill():
    from papermill.engines import papermill_engines

    assert register() == ENGINE and papermill_engines.get_engine(ENGINE) is SlicedPollEngine
