"""The event loop watchdog: stalls are reported once, naming the coroutine that held
the loop; no timing budget decides a test: a stall is made far longer than the
threshold, and a test asserts that it was seen, never that nothing else was (steps are
timed in wall time: on a busy machine a process left without the CPU stalls too)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from spawnflow.bootstrap import metrics
from spawnflow.bootstrap.loopwatch import LoopWatchdog

THRESHOLD = 0.05


@pytest.fixture(autouse=True)
def _settings(make_settings):
    make_settings()  # the metrics read theirs


def watched(main, *, with_factory: bool = False):
    stalls: list[tuple[float, list[str]]] = []

    def on_stall(seconds: float, names: list[str]) -> None:
        stalls.append((seconds, names))

    watchdog = LoopWatchdog(THRESHOLD, metric="tests.blocked", interval=0.01, on_stall=on_stall)

    async def run():
        loop = asyncio.get_running_loop()
        if with_factory:
            loop.set_task_factory(watchdog.task_factory(lambda coro: coro.__qualname__))
        watchdog.install()
        try:
            await main(watchdog)
            await asyncio.sleep(0.05)  # the sampler's next turn
        finally:
            watchdog.close()

    asyncio.run(run())
    return stalls


def test_a_coroutine_that_blocks_is_named_with_how_long_it_held_the_loop():
    before = metrics.total("tests.blocked")

    async def main(watchdog):
        async def blocker():
            time.sleep(0.3)  # six thresholds

        async def polite():
            await asyncio.sleep(0.3)

        await asyncio.gather(
            watchdog.timed(blocker(), "blocker"), watchdog.timed(polite(), "polite")
        )

    stalls = watched(main)
    named = [(seconds, names) for seconds, names in stalls if names == ["blocker"]]
    assert len(named) == 1  # reported once, by the thread or the sampler (unnamed ones: load)
    assert named[0][0] >= 0.3 - 0.01
    assert metrics.total("tests.blocked") >= before + 1


def test_tasks_a_coroutine_starts_are_watched_through_the_task_factory():
    async def main(_watchdog):
        async def child_of_the_task():
            time.sleep(0.3)

        await asyncio.get_running_loop().create_task(child_of_the_task())

    stalls = watched(main, with_factory=True)
    assert any(names and "child_of_the_task" in names[0] for _, names in stalls)


def test_a_stall_outside_any_coroutine_is_reported_without_a_name():
    async def main(_watchdog):
        done = asyncio.Event()

        def blocking_callback():
            time.sleep(0.3)
            done.set()

        asyncio.get_running_loop().call_soon(blocking_callback)
        await done.wait()

    stalls = watched(main)
    assert any(names == [] and seconds >= 0.2 for seconds, names in stalls)


def test_a_stall_that_does_not_end_is_reported_while_it_lasts():
    reported = threading.Event()
    stalls: list[list[str]] = []

    def on_stall(_seconds, names):
        stalls.append(names)
        reported.set()

    watchdog = LoopWatchdog(THRESHOLD, metric="tests.blocked", on_stall=on_stall, interval=0.01)

    async def hangs():
        # A hung native call, as far as the loop knows: it returns only once reported.
        assert reported.wait(timeout=60)

    async def run():
        watchdog.install()
        try:
            await watchdog.timed(hangs(), "hangs")
        finally:
            watchdog.close()

    asyncio.run(run())
    # Reported once, while it lasted; the sampler does not report it again once it ended
    # (a busy machine may add stalls nobody caused: they have no name).
    assert stalls.count(["hangs"]) == 1


def test_a_stall_in_a_coroutines_last_step_is_reported_when_the_watch_closes():
    stalls: list[list[str]] = []
    watchdog = LoopWatchdog(THRESHOLD, metric="tests.blocked",
                            on_stall=lambda _seconds, names: stalls.append(names))  # fmt: skip

    async def run():
        watchdog.install()

        async def last_step_blocks():
            time.sleep(0.3)

        await asyncio.get_running_loop().create_task(watchdog.timed(last_step_blocks(), "last"))
        watchdog.close()  # before the sampler's next look

    asyncio.run(run())
    assert stalls.count(["last"]) == 1
