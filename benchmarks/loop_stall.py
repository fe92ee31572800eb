"""How long state store accessors hold an event loop, and whether the watchdog says so.

Issue 13's measurement, after apache/airflow#72129 (async accessors that ran the
backend's sync hooks, object storage I/O included, on the loop's thread). Three parts:

1. **Loop stall per call.** Each ``aset``/``aget``/``adelete``/``aclear`` runs as an
   asyncio task whose every step on the loop's thread is timed; a call's stall is its
   longest step (how long it kept every other coroutine from running). Backends: none
   (``database``: values in the row), object storage on the local file system, an S3
   API on loopback (moto's server), and the same S3 through a proxy adding 50 ms and
   200 ms of round trip (a bucket in another region). Payloads below the offload
   threshold (100 B; the threshold is 1 KiB here), above it (10 KB) and ~1 MB; gzip
   off and on; 1, 10 and 100 coroutines at once. ``spawnflow`` is the shipped
   accessors; ``naive`` is a backend whose async variants call the sync hooks on the
   loop (the before-picture). The parent's answers come from memory, in a worker
   thread, as a supervisor's or a triggerer's arrive.
2. **The blocking matrix.** The product's watchdog (bootstrap/loopwatch.py) on the
   loop, at the default 0.2 s threshold and at 0.01 s, in this process and again with
   ``PYTHONASYNCIODEBUG=1``: for each accessor and backend, how often it logged a
   stall and whether it named the watcher. Target: never for spawnflow's accessors;
   it does for the naive backend, naming it.
3. **1,000 idle triggers.** A real trigger runner child (role ``trigger-runner``) with
   1,000 ``TimeDeltaTrigger`` (an hour each), beside a probe trigger that measures the
   lag of its own sleeps; its memory (RSS, PSS) and the probe's lag, against the same
   runner with the probe alone.

    python benchmarks/loop_stall.py [--quick] [--parts 1,2,3] [--method spawn]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
THRESHOLD = 1024  # bytes: values smaller than this stay in the row
PAYLOADS = {"100B": 100, "10KB": 10_000, "1MB": 1_000_000}
ACCESSORS = ("aset", "aget", "adelete", "aclear")


# -- what every part needs -------------------------------------------------------------


class Parent:
    """Answers state store requests from memory, as the triggerer does from its rows."""

    def __init__(self) -> None:
        self.rows: dict[tuple, tuple[str | None, str | None]] = {}
        self.lock = threading.Lock()

    def ask(self, make):
        from spawnflow.comms import state as m

        request = make(1)
        owner, key = request.ref.owner, request.ref.key
        with self.lock:
            if isinstance(request, m.GetState):
                value, reference = self.rows.get((owner, key), (None, None))
                return m.StateValue(id=1, value=value, reference=reference)
            if isinstance(request, m.ClearState):
                gone = [r for (o, _), (_, r) in self.rows.items() if o == owner and r]
                self.rows = {k: v for k, v in self.rows.items() if k[0] != owner}
                return m.StateReplaced(id=1, previous=gone)
            _, old = self.rows.pop((owner, key), (None, None))
            kept = None
            if isinstance(request, m.SetState):
                self.rows[(owner, key)] = (request.value, request.reference)
                kept = request.reference
            return m.StateReplaced(id=1, previous=[old] if old and old != kept else [])


class Longest:
    """Times each step a coroutine takes on the loop's thread; keeps the longest."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def around(self, coro: Coroutine) -> Coroutine:
        return _Stepped(coro, self)


class _Stepped(Coroutine):
    def __init__(self, inner: Coroutine, longest: Longest):
        self._inner, self._longest = inner, longest

    def _timed(self, step, *args):
        started = time.perf_counter()
        try:
            return step(*args)
        finally:
            self._longest.seconds = max(self._longest.seconds, time.perf_counter() - started)

    def send(self, value):
        return self._timed(self._inner.send, value)

    def throw(self, *args):
        return self._timed(self._inner.throw, *args)

    def close(self):
        self._inner.close()

    def __await__(self):
        return self._inner.__await__()


def settings_for(storage: str, backend: str, gzip: bool, options: dict | None = None):
    """A settings snapshot for one backend, installed (the metrics read it)."""
    from spawnflow.bootstrap import settings

    values = {
        "state_store.backend": backend,
        "state_store.objectstorage_path": storage,
        "state_store.objectstorage_threshold": str(THRESHOLD),
        "state_store.objectstorage_compression": "gzip" if gzip else "none",
        "state_store.objectstorage_options": json.dumps(options or {}),
    }
    overrides = [settings.Override(k, v, "benchmark") for k, v in values.items()]
    snapshot = settings.resolve(environ={"SPAWNFLOW_HOME": tempfile.mkdtemp()},
                                overrides=overrides)  # fmt: skip
    settings.install(snapshot)
    return snapshot


def backend_for(snapshot, kind: str):
    from _state_backends import NaiveBackend

    from spawnflow.sdk.state import DatabaseStateBackend
    from spawnflow.xcoms.objectstorage import ObjectStorageStateBackend

    if snapshot.state_store.backend == "database":
        return DatabaseStateBackend(snapshot)
    return (NaiveBackend if kind == "naive" else ObjectStorageStateBackend)(snapshot)


class Backends:
    """The storage places: local files, S3 on loopback, S3 through delaying proxies."""

    def __init__(self, folder: Path, with_s3: bool, delays: tuple[int, ...]):
        self.places: dict[str, tuple[str, dict]] = {
            "none": ("", {}), "local fs": ((folder / "objects").as_uri(), {}),
        }  # fmt: skip
        self.processes: list[subprocess.Popen] = []
        if with_s3:
            from _setup import start_s3

            server, endpoint = start_s3()
            self.processes.append(server)
            port = int(endpoint.rsplit(":", 1)[1])
            self.places["S3 loopback"] = ("s3://bench/state", _s3_options(endpoint))
            for delay in delays:
                proxy_port = _free_port()
                proxy = subprocess.Popen(
                    [sys.executable, str(HERE / "_delay_proxy.py"), str(proxy_port),
                     "127.0.0.1", str(port), str(delay)],
                    stdout=subprocess.PIPE, text=True,
                )  # fmt: skip
                assert proxy.stdout is not None
                assert proxy.stdout.readline() == "listening\n"
                self.processes.append(proxy)
                options = _s3_options(f"http://127.0.0.1:{proxy_port}")
                self.places[f"S3 +{delay} ms"] = ("s3://bench/state", options)

    def close(self) -> None:
        for process in self.processes:
            process.kill()


def _s3_options(endpoint: str) -> dict:
    return {"endpoint_url": endpoint, "key": "bench", "secret": "bench",
            "client_kwargs": {"region_name": "us-east-1"}}  # fmt: skip


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def store_for(backend, owner: str):
    from spawnflow.sdk.state import StateStore

    parent = Parent()
    return StateStore("asset", (owner,), parent.ask, lambda: backend)


def stats_ms(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p50 = ordered[len(ordered) // 2]
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return p50 * 1000, p95 * 1000, ordered[-1] * 1000


# -- part 1: stall per call ------------------------------------------------------------


async def _one_cell(backend, payload: int, concurrency: int, rounds: int) -> dict[str, list]:
    """``concurrency`` coroutines, each ``rounds`` times: aset, aget, adelete, then one
    aclear each; every call's longest step on the loop."""
    stalls: dict[str, list[float]] = {name: [] for name in ACCESSORS}
    value = "v" * max(1, payload - 2)

    async def worker(n: int) -> None:
        store = store_for(backend, f"bench://owner-{n}")

        async def timed(name: str, call) -> Any:
            longest = Longest()
            result = await asyncio.get_running_loop().create_task(longest.around(call))
            stalls[name].append(longest.seconds)
            return result

        for turn in range(rounds):
            await timed("aset", store.aset(f"k{turn}", value))
            got = await timed("aget", store.aget(f"k{turn}"))
            assert got == value
            await timed("adelete", store.adelete(f"k{turn}"))
        await store.aset("last", value)
        await timed("aclear", store.aclear())

    await asyncio.gather(*(worker(n) for n in range(concurrency)))
    return stalls


def part_stalls(places: Backends, quick: bool) -> None:
    print("\n## 1. Loop stall per call (ms: p50 / p95 / max), spawnflow's accessors vs naive")
    rows = []
    cells = []
    for place, payload, gzip in itertools.product(places.places, PAYLOADS, (False, True)):
        if place == "none" and gzip:
            continue  # no object, nothing to compress
        cells.append((place, payload, gzip, 1))
    for place in places.places:
        cells += [(place, "10KB", False, 10), (place, "10KB", False, 100)]
    for place, payload, gzip, concurrency in cells:
        storage, options = places.places[place]
        slow = "+" in place
        rounds = 2 if slow or quick else (3 if concurrency > 1 else 20)
        if slow and concurrency == 100:
            rounds = 1
        for kind in ("spawnflow", "naive"):
            snapshot = settings_for(storage, "database" if place == "none" else "objectstorage",
                                    gzip, options)  # fmt: skip
            backend = backend_for(snapshot, kind)
            stalls = asyncio.run(_one_cell(backend, PAYLOADS[payload], concurrency, rounds))
            rows.append((place, payload, "gzip" if gzip else "-", concurrency, kind, stalls))
            print(_stall_row(rows[-1]), flush=True)


def _stall_row(row) -> str:
    place, payload, gzip, concurrency, kind, stalls = row
    cells = "  ".join(
        "{:>6.2f}/{:>7.2f}/{:>7.2f}".format(*stats_ms(stalls[name])) for name in ACCESSORS
    )
    return f"| {place:<11} | {payload:>4} | {gzip:<4} | {concurrency:>3} | {kind:<9} | {cells} |"


# -- part 2: the blocking matrix ---------------------------------------------------------


def blocking_matrix(places: Backends, thresholds: tuple[float, ...], calls: int) -> list[dict]:
    """For each accessor and backend: what the watchdog saw, at each threshold."""
    from spawnflow.bootstrap import metrics

    found = []
    accessors = (
        "aget offloaded",
        "naive aget, inline",
        "aset below",
        "aset above",
        "adelete",
        "aclear",
    )
    wanted = [p for p in ("none", "local fs", "S3 loopback", "S3 +200 ms") if p in places.places]
    for threshold, place, accessor in itertools.product(thresholds, wanted, accessors):
        storage, options = places.places[place]
        kind = "naive" if accessor.startswith("naive") else "spawnflow"
        snapshot = settings_for(storage, "database" if place == "none" else "objectstorage",
                                False, options)  # fmt: skip
        before = metrics.total("triggers.blocked_main_thread")
        named = asyncio.run(_watched_calls(backend_for(snapshot, kind), place, accessor,
                                           threshold, calls))  # fmt: skip
        counted = metrics.total("triggers.blocked_main_thread") - before
        found.append({
            "threshold": threshold, "backend": place, "accessor": accessor, "calls": calls,
            "stalls": counted, "named": any(any("asset watcher" in n for n in ns) for ns in named),
        })  # fmt: skip
    return found


async def _watched_calls(backend, place: str, accessor: str, threshold: float,
                         calls: int) -> list[list[str]]:  # fmt: skip
    """``calls`` calls of ``accessor`` under the product's watchdog; the culprits it named."""
    from spawnflow.bootstrap.loopwatch import LoopWatchdog

    named: list[list[str]] = []
    watchdog = LoopWatchdog(threshold, metric="triggers.blocked_main_thread",
                            on_stall=lambda _s, names: named.append(names))  # fmt: skip
    watchdog.install()
    store = store_for(backend, f"bench://{place}")
    value = "v" * (100 if accessor == "aset below" else 10_000)
    await store.aset("k", value)
    name = f"asset watcher bench://{place} ({accessor})"
    try:
        for n in range(calls):
            if "aget" in accessor:
                call = store.aget("k")
            elif accessor.startswith("aset"):
                call = store.aset("k", value + str(n))
            elif accessor == "adelete":
                await store.aset(f"d{n}", value)
                call = store.adelete(f"d{n}")
            else:
                await store.aset(f"c{n}", value)
                call = store.aclear()
            await asyncio.get_running_loop().create_task(watchdog.timed(call, name))
        await asyncio.sleep(2 * watchdog.interval)
    finally:
        watchdog.close()
    return named


def part_matrix(places: Backends, quick: bool) -> None:
    calls = 5 if quick else 20
    print(f"\n## 2. Blocking matrix: stalls the watchdog logged and counted in {calls} calls "
          "(and whether it named the watcher)")  # fmt: skip
    here = blocking_matrix(places, (0.2, 0.01), calls)
    env = {**os.environ, "PYTHONASYNCIODEBUG": "1"}
    done = subprocess.run([sys.executable, __file__, "--matrix-only", str(calls),
                           "--quick" if quick else "--full"],
                          env=env, capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the PYTHONASYNCIODEBUG=1 run failed:\n{done.stderr}")
    debug = json.loads(done.stdout.splitlines()[-1])
    print("| threshold | backend | accessor | stalls | named | with PYTHONASYNCIODEBUG=1 |")
    print("|---|---|---|---|---|---|")
    for mine, theirs in zip(here, debug, strict=True):
        print(f"| {mine['threshold']:g} s | {mine['backend']} | {mine['accessor']} | "
              f"{mine['stalls']:g} | {'yes' if mine['named'] else '-'} | "
              f"{theirs['stalls']:g}{' (named)' if theirs['named'] else ''} |")  # fmt: skip


# -- part 3: 1,000 idle triggers ---------------------------------------------------------


def part_idle(method: str, idle: int) -> None:
    from spawnflow.bootstrap import settings

    print(f"\n## 3. {idle} idle TimeDeltaTriggers on one trigger runner ({method})")
    overrides = [settings.Override("core.mp_start_method", method, "benchmark")]
    snapshot = settings.resolve(environ={"SPAWNFLOW_HOME": tempfile.mkdtemp()},
                                overrides=overrides)  # fmt: skip
    settings.install(snapshot)
    for count in (0, idle):
        before, after, late = _runner_with(snapshot, count)
        p50, p95, most = (x / 1000 for x in stats_ms(late))
        print(f"| {count:>5} idle + probe | RSS {before.rss / 2**20:6.1f} -> "
              f"{after.rss / 2**20:6.1f} MiB | PSS {after.pss / 2**20:6.1f} MiB | probe lag "
              f"p50 {p50:.2f} ms, p95 {p95:.2f} ms, max {most:.2f} ms |")  # fmt: skip


def _runner_with(snapshot, count: int):
    """A trigger runner with ``count`` idle triggers and the probe: its memory before and
    after, and the probe's lateness per sleep (ms)."""
    import psutil
    from _state_backends import LagProbe

    from spawnflow.bootstrap import launcher, wire
    from spawnflow.bootstrap.watch import Watch
    from spawnflow.comms.triggers import RunTrigger, TriggerFired
    from spawnflow.sdk import xcom
    from spawnflow.sdk.triggers import TimeDeltaTrigger

    runner = launcher.launch(launcher.ChildSpec(
        "trigger-runner", "spawnflow.processors.triggerer.runner:run", settings=snapshot
    ))  # fmt: skip
    watch = Watch()
    lags: list[list[float]] = []

    def on_message(_watched, message: wire.Message) -> None:
        if isinstance(message, TriggerFired):
            lags.append(xcom.decode(message.payload)["late_ms"])

    watch.add(runner, on_message=on_message)
    watch.until(lambda: runner.ready is not None, timeout=120)
    before = psutil.Process(runner.pid).memory_full_info()
    classpath, kwargs = TimeDeltaTrigger(3600).serialize()
    for n in range(count):
        runner.channel.send(RunTrigger(trigger_id=n + 2, classpath=classpath,
                                       kwargs=xcom.encode(kwargs), owner=f"idle {n}"))  # fmt: skip
    probe_path, probe_kwargs = LagProbe().serialize()
    runner.channel.send(RunTrigger(trigger_id=1, classpath=probe_path,
                                   kwargs=xcom.encode(probe_kwargs), owner="probe"))  # fmt: skip
    watch.until(lambda: bool(lags), timeout=600)
    after = psutil.Process(runner.pid).memory_full_info()
    runner.stop(grace=5)
    return before, after, lags[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls per cell")
    parser.add_argument("--full", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--parts", default="1,2,3")
    parser.add_argument("--method", default="spawn", help="start method of part 3's runner")
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--no-s3", action="store_true")
    parser.add_argument("--matrix-only", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path[:0] = [str(HERE.parent), str(HERE)]
    from spawnflow.bootstrap import logs

    logs.configure("benchmark", console=True, console_level="ERROR")
    folder = Path(tempfile.mkdtemp(prefix="loop-stall-"))
    parts = set(args.parts.split(","))
    with_s3 = not args.no_s3 and (parts & {"1", "2"} or args.matrix_only)
    places = Backends(folder, bool(with_s3), (50, 200))
    try:
        if args.matrix_only:
            print(json.dumps(blocking_matrix(places, (0.2, 0.01), args.matrix_only)))
            return
        print(f"python {sys.version.split()[0]}, offload threshold {THRESHOLD} B; "
              "columns: aset, aget, adelete, aclear")  # fmt: skip
        if "1" in parts:
            part_stalls(places, args.quick)
        if "2" in parts:
            part_matrix(places, args.quick)
        if "3" in parts:
            part_idle(args.method, args.idle)
    finally:
        places.close()


if __name__ == "__main__":
    main()
