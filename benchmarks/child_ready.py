"""Child-ready latency and idle memory: the launcher against a bare multiprocess Process.

For each start method, alternately starts a bare ``multiprocess`` Process whose trivial
target sends one message on a pipe, and a launcher child (settings snapshot, logging,
process group, target import, Ready). Latency is from the start call until the parent
has the child's first message. Prints median and p95 per method, the launcher/bare ratio
of medians (target: at most 1.5), and the peak RSS of an idle child of each kind.

    python benchmarks/child_ready.py [--launches 30] [--methods fork,forkserver,spawn]

Both kinds of child run targets from ``_targets.py``, a module as light as a role's
entry module; this script imports nothing from spawnflow at the top, so a spawned bare
child that re-imports it as its parent's main module does not pay for spawnflow.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import multiprocess
from _targets import bare_idle, bare_target


def time_bare(ctx) -> float:
    # Timed like the launcher: from asking for a child (pipe and process object
    # included) until its first message is in hand.
    started = time.perf_counter()
    parent, child = ctx.Pipe()
    process = ctx.Process(target=bare_target, args=(child,))
    process.start()
    child.close()
    parent.recv_bytes()
    elapsed = time.perf_counter() - started
    process.join()
    parent.close()
    return elapsed


def time_launcher(method: str, spec) -> float:
    from spawnflow.bootstrap.launcher import launch

    child = launch(spec, method=method)
    child.wait_ready()
    child.join(timeout=60)
    return child.ready_seconds


def rss_bare(ctx) -> int:
    parent, child = ctx.Pipe()
    process = ctx.Process(target=bare_idle, args=(child,))
    process.start()
    child.close()
    peak = int(parent.recv_bytes())
    # A fork child holds a copy of our end too, so closing it would not be EOF there.
    parent.send_bytes(b"leave")
    process.join()
    parent.close()
    return peak


def rss_launcher(method: str, spec) -> int:
    from spawnflow.bootstrap.launcher import launch

    child = launch(spec, method=method)
    child.wait_ready()
    report = child.channel.recv(timeout=60)
    child.stop(grace=10)
    return report.peak_rss_bytes


def summary(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered), p95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=30)
    parser.add_argument("--methods", default=None, help="comma-separated; default: all on this OS")
    args = parser.parse_args()

    import spawnflow.comms  # noqa: F401 - registers ResourceReport for decoding
    from spawnflow.bootstrap import logs, settings, startmethods
    from spawnflow.bootstrap.launcher import ChildSpec

    home = tempfile.mkdtemp(prefix="spawnflow-bench-")
    snapshot = settings.resolve(environ={"SPAWNFLOW_HOME": home})
    settings.install(snapshot)
    logs.configure("benchmark", console=True, console_level="WARNING")
    methods = args.methods.split(",") if args.methods else list(startmethods.available())
    ready_spec = ChildSpec("bench-child", "_targets:launcher_target")
    idle_spec = ChildSpec("bench-child", "_targets:launcher_idle")

    print(f"child-ready latency, {args.launches} launches each (after 3 warm-up launches)")
    print(
        f"{'method':<11}{'bare median':>12}{'bare p95':>10}{'launcher median':>17}"
        f"{'launcher p95':>14}{'ratio':>7}   {'idle RSS bare':>13}{'idle RSS launcher':>18}"
    )
    for method in methods:
        ctx = startmethods.context(method)
        for _ in range(3):  # start the forkserver, fill caches
            time_bare(ctx)
            time_launcher(method, ready_spec)
        bare, launched = [], []
        for _ in range(args.launches):  # alternate, so drift hits both alike
            bare.append(time_bare(ctx))
            launched.append(time_launcher(method, ready_spec))
        bare_median, bare_p95 = summary(bare)
        launcher_median, launcher_p95 = summary(launched)
        print(
            f"{method:<11}{bare_median * 1e3:>10.1f}ms{bare_p95 * 1e3:>8.1f}ms"
            f"{launcher_median * 1e3:>15.1f}ms{launcher_p95 * 1e3:>12.1f}ms"
            f"{launcher_median / bare_median:>7.2f}   "
            f"{rss_bare(ctx) / 2**20:>10.1f}MiB{rss_launcher(method, idle_spec) / 2**20:>15.1f}MiB"
        )


if __name__ == "__main__":
    multiprocess.freeze_support()
    main()
