"""Child-ready latency, start CPU and idle memory: the launcher against bare Processes of
the standard library's ``multiprocessing`` (which the launcher is built on) and of
``multiprocess`` (which it was built on until dill's import showed in every spawned child).

For each start method, in turn: a bare stdlib Process and a bare ``multiprocess``
Process whose trivial target sends one message on a pipe, and a launcher child
(settings snapshot, logging, process group, target import, Ready). Latency is from the
start call until the parent has the child's first message (the launcher's Ready). Start
CPU is what the child itself used from its birth until that message (user and system;
a new process's CPU times start at zero, under fork too), reported by the child. Prints
medians and p95s per method, the launcher's ratio of medians against each baseline
(target: at most 1.5 against the stdlib), and the peak RSS of an idle child of each kind.

    python benchmarks/child_ready.py [--launches 30] [--methods fork,forkserver,spawn]

The children run targets from ``_targets.py``, a module as light as a role's entry
module; this script imports nothing but the standard library at the top, so a spawned
bare child that re-imports it as its parent's main module pays for neither spawnflow
nor ``multiprocess`` (a stdlib child would otherwise import ``multiprocess`` and dill).
``multiprocess`` comes with the ``dev`` extra.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from _setup import as_installed, summary
from _targets import bare_idle, bare_target


def time_bare(ctx) -> tuple[float, float]:
    # Timed like the launcher: from asking for a child (pipe and process object
    # included) until its first message is in hand.
    started = time.perf_counter()
    parent, child = ctx.Pipe()
    process = ctx.Process(target=bare_target, args=(child,))
    process.start()
    child.close()
    cpu = float(parent.recv_bytes())
    elapsed = time.perf_counter() - started
    process.join()
    parent.close()
    return elapsed, cpu


def time_launcher(method: str, spec) -> tuple[float, float]:
    from spawnflow.bootstrap.launcher import launch

    child = launch(spec, method=method)
    child.wait_ready()
    report = child.channel.recv(timeout=60)
    child.join(timeout=60)
    return child.ready_seconds, report.cpu_seconds


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


KINDS = ("stdlib", "multiprocess", "launcher")


def one(kind: str, method: str, contexts: dict, spec) -> tuple[float, float]:
    """Latency and start CPU of one child of ``kind``."""
    if kind == "launcher":
        return time_launcher(method, spec)
    return time_bare(contexts[kind])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=30)
    parser.add_argument("--methods", default=None, help="comma-separated; default: all on this OS")
    args = parser.parse_args()
    as_installed()

    import multiprocessing

    import multiprocess

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

    print(f"{args.launches} launches of each kind per method, interleaved, after 3 warm-up rounds")
    rows = []
    for method in methods:
        contexts = {"stdlib": multiprocessing.get_context(method),
                    "multiprocess": multiprocess.get_context(method)}  # fmt: skip

        for _ in range(3):  # start the forkservers, fill caches
            # The launcher first: its forkserver is the standard library's one per
            # process, which the bare stdlib children share; started by the launcher
            # it has spawnflow's preload, as in use.
            for kind in reversed(KINDS):
                one(kind, method, contexts, ready_spec)
        latency: dict[str, list[float]] = {kind: [] for kind in KINDS}
        cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for _ in range(args.launches):  # interleaved, so drift hits every kind alike
            for kind in KINDS:
                elapsed, used = one(kind, method, contexts, ready_spec)
                latency[kind].append(elapsed)
                cpu[kind].append(used)
        rss = {kind: rss_bare(ctx) for kind, ctx in contexts.items()}
        rss["launcher"] = rss_launcher(method, idle_spec)
        rows.append((method, {k: summary(v) for k, v in latency.items()},
                     {k: summary(v) for k, v in cpu.items()}, rss))  # fmt: skip

    def table(title: str, column: int) -> None:
        print(f"\n{title} (median / p95, ms)")
        print(f"{'method':<11}" + "".join(f"{kind:>20}" for kind in KINDS)
              + f"{'vs stdlib':>11}{'vs multiprocess':>17}")  # fmt: skip
        for method, *figures in rows:
            values = figures[column]
            cells = "".join(f"{m * 1e3:>11.1f} / {p * 1e3:>6.1f}" for m, p in values.values())
            ours = values["launcher"][0]
            print(f"{method:<11}{cells}{ours / values['stdlib'][0]:>10.2f}x"
                  f"{ours / values['multiprocess'][0]:>16.2f}x")  # fmt: skip

    table("child-ready latency", 0)
    table("start CPU of the child, from its birth to its first message", 1)
    print("\nidle child peak RSS, MiB")
    print(f"{'method':<11}" + "".join(f"{kind:>14}" for kind in KINDS))
    for method, _, _, rss in rows:
        print(f"{method:<11}" + "".join(f"{rss[kind] / 2**20:>14.1f}" for kind in KINDS))


if __name__ == "__main__":
    import multiprocessing

    multiprocessing.freeze_support()
    main()
