"""An executor worker (role ``executor-worker``): supervise the tasks it is sent, one by one.

Holds its own engine (law 3): it writes the task instance's state and heartbeats.
Tells the executor it is alive every heartbeat interval, idle or busy, so that a
worker that hangs is noticed. A warm stop lets the current task finish; a second
request stops it at once.
"""

from __future__ import annotations

import time

from spawnflow.bootstrap import forkservers, lifecycle, logs
from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.wire import Channel
from spawnflow.comms.tasks import RunTask, TaskFinished, WorkerAlive
from spawnflow.processors.worker.supervisor import TaskSupervisor


def run(channel: Channel, *, xcom_backend=None) -> None:
    """Serve RunTask requests until stopped or until the executor closes the channel."""
    lifecycle.defer_warm_stop()
    settings = settings_module.current()
    log = logs.get_logger("spawnflow.worker")
    try:
        forkservers.start_early(settings, "task")  # unless the executor's is handed down
    except (OSError, UserError) as error:  # the first launch tries again, failing its try
        log.warning("could not start the forkserver before the first task", error=str(error))
    interval = settings.executor.heartbeat_interval
    last_said = 0.0
    executor_gone = False

    def alive() -> None:
        nonlocal last_said, executor_gone
        last_said = time.monotonic()
        if executor_gone:
            return
        try:
            channel.send(WorkerAlive())
        except OSError:
            # The executor died (its process ended): the control pipe's EOF stops us
            # warm; the task that runs may still finish and record how it ended.
            executor_gone = True

    while not lifecycle.stop_requested.is_set() and not executor_gone:
        if time.monotonic() - last_said >= interval:
            alive()
        if not channel.poll(min(0.5, interval)):
            continue
        try:
            message = channel.recv()
        except EOFError:
            return  # the executor is gone
        if not isinstance(message, RunTask):
            continue
        workload = message.workload
        log.info("running task", dag_id=workload.dag_id, task_id=workload.task_id,
                 run_id=workload.run_id, try_number=workload.try_number)  # fmt: skip
        supervisor = TaskSupervisor(workload, settings, xcom_backend=xcom_backend, alive=alive)
        took = time.monotonic()
        state = supervisor.run()
        took = round(time.monotonic() - took, 3)
        try:
            channel.send(TaskFinished(id=message.id, ti_id=workload.ti_id, state=state,
                                      seconds=took))  # fmt: skip
        except OSError:
            return  # the executor is gone; the state is recorded in the database
