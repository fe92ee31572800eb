"""First-trigger latency: what a trigger waits when its triggerer holds no runner and
starts one for it (``[triggerer] runner_idle_timeout``), against a runner that stays.

For each start method, in a process of its own: a stand-in triggerer is launched as
``standalone`` launches the real one (handed the tree's shared forkservers), and there
times two kinds of round with a trigger already due (a DateTimeTrigger in the past, so
that the trigger itself takes no time):

- **on demand**: a runner launched as the triggerer launches one (same spec), its Ready,
  a ``RunTrigger``, the runner's ``TriggerFired``; then the runner leaves and, under
  forkserver, the stand-in lets its own server go, as an idle triggerer does, so that
  the next round forks that server from the shared one again (checked);
- **kept**, once those are done (a runner that stays would keep the server): the same
  ``RunTrigger`` to a runner that stays, until its ``TriggerFired``.

Prints medians and p95s per method, the on-demand round's ratio against the kept one
in the same process, and what starting on demand adds (the difference of the medians).

    python benchmarks/trigger_latency.py [--rounds 20] [--methods fork,forkserver,spawn]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _setup import as_installed, summary

WARM_UP = 2


def rounds(channel, count: int, out: str) -> None:
    """The stand-in triggerer (a launcher child): time the rounds, write them to ``out``."""
    from datetime import UTC, datetime

    from spawnflow.bootstrap import forkservers, launcher, settings
    from spawnflow.comms.triggers import RunTrigger, TriggerFired
    from spawnflow.processors.triggerer.job import RUNNER_TARGET
    from spawnflow.sdk import xcom
    from spawnflow.sdk.triggers import DateTimeTrigger

    classpath, kwargs = DateTimeTrigger(datetime(2000, 1, 1, tzinfo=UTC)).serialize()
    due = xcom.encode(kwargs)
    spec = launcher.ChildSpec("trigger-runner", RUNNER_TARGET, settings=settings.current(),
                              kill_with_parent=True)  # fmt: skip

    def fired(runner, trigger_id: int) -> None:
        runner.channel.send(RunTrigger(trigger_id=trigger_id, classpath=classpath,
                                       kwargs=due, owner="benchmark"))  # fmt: skip
        while True:
            message = runner.channel.recv(timeout=120)
            if isinstance(message, TriggerFired) and message.trigger_id == trigger_id:
                return

    def on_demand(trigger_id: int) -> float:
        started = time.perf_counter()
        runner = launcher.launch(spec)
        runner.wait_ready(timeout=120)
        fired(runner, trigger_id)
        elapsed = time.perf_counter() - started
        runner.stop(grace=10)
        forkservers.let_go("trigger-runner")
        if runner.method == "forkserver" and forkservers.server_for("trigger-runner").running():
            raise SystemExit("the stand-in's own forkserver was not let go")
        return elapsed

    def kept_round(runner, trigger_id: int) -> float:
        started = time.perf_counter()
        fired(runner, trigger_id)
        return time.perf_counter() - started

    figures = {"on demand": [on_demand(n) for n in range(WARM_UP + count)][WARM_UP:]}
    kept = launcher.launch(spec)
    kept.wait_ready(timeout=120)
    figures["kept"] = [kept_round(kept, n) for n in range(WARM_UP + count)][WARM_UP:]
    kept.stop(grace=10)
    Path(out).write_text(json.dumps(figures))


def one_method(method: str, count: int) -> dict[str, list[float]]:
    """Launch the stand-in triggerer under ``method`` as standalone does; its figures."""
    from spawnflow.bootstrap import forkservers, launcher, logs, settings, startmethods

    home = tempfile.mkdtemp(prefix="spawnflow-bench-")
    overrides = [settings.Override("core.mp_start_method", method, "benchmark")]
    snapshot = settings.resolve(environ={"SPAWNFLOW_HOME": home}, overrides=overrides)
    settings.install(snapshot)
    logs.configure("benchmark", console=True, console_level="WARNING")
    forkservers.share(snapshot, startmethods.ROLE_COMPONENTS)
    out = Path(home) / "figures.json"
    spec = launcher.ChildSpec("triggerer", "trigger_latency:rounds",
                              kwargs={"count": count, "out": str(out)}, settings=snapshot,
                              warm_stop_group=False)  # fmt: skip
    child = launcher.launch(spec, share_forkservers=True)
    status = child.join(timeout=600)
    if status is None or status.exitcode != 0:
        child.stop(grace=10)
        raise SystemExit(f"the stand-in triggerer under {method}: {child.exit_status()}")
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--methods", default=None, help="comma-separated; default: all on this OS")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a method, in a child
    args = parser.parse_args()
    as_installed()
    if args.one:
        print(json.dumps(one_method(args.one, args.rounds)))
        return

    from spawnflow.bootstrap import startmethods

    methods = args.methods.split(",") if args.methods else list(startmethods.available())
    print(f"{args.rounds} rounds of each kind per method, after {WARM_UP} warm-up rounds; a"
          " trigger already due, from RunTrigger (or the runner's launch) to its"
          " TriggerFired")  # fmt: skip
    print(f"\n{'method':<11}{'kept':>20}{'on demand':>20}{'ratio':>8}{'added':>10}")
    print(f"{'':<11}{'median / p95, ms':>20}{'median / p95, ms':>20}{'':>8}{'ms':>10}")
    for method in methods:
        # Each method in a process of its own: the forkservers of one never serve another.
        done = subprocess.run([sys.executable, __file__, "--one", method, "--rounds",
                               str(args.rounds)], capture_output=True, text=True)  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"{method}: {done.stderr.strip()}")
        figures = json.loads(done.stdout.splitlines()[-1])
        (kept, kept_p95), (cold, cold_p95) = summary(figures["kept"]), summary(figures["on demand"])
        print(f"{method:<11}{kept * 1e3:>11.1f} / {kept_p95 * 1e3:>6.1f}"
              f"{cold * 1e3:>11.1f} / {cold_p95 * 1e3:>6.1f}{cold / kept:>7.1f}x"
              f"{(cold - kept) * 1e3:>10.1f}")  # fmt: skip


if __name__ == "__main__":
    import multiprocessing

    multiprocessing.freeze_support()
    main()
