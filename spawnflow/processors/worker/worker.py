"""An executor worker (role ``executor-worker``): supervise the tasks it is sent, one by one.

Holds its own engine (law 3): it writes the task instance's state and heartbeats.
A warm stop lets the current task finish; a second request stops it at once.
"""

from __future__ import annotations

from spawnflow.bootstrap import lifecycle, logs
from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap.wire import Channel
from spawnflow.comms.tasks import RunTask, TaskFinished
from spawnflow.processors.worker.supervisor import TaskSupervisor


def run(channel: Channel, *, method: str | None = None, xcom_backend=None) -> None:
    """Serve RunTask requests until stopped or until the executor closes the channel."""
    lifecycle.defer_warm_stop()
    settings = settings_module.current()
    log = logs.get_logger("spawnflow.worker")
    while not lifecycle.stop_requested.is_set():
        if not channel.poll(0.5):
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
        supervisor = TaskSupervisor(workload, settings, method=method, xcom_backend=xcom_backend)
        state = supervisor.run()
        channel.send(TaskFinished(id=message.id, ti_id=workload.ti_id, state=state))
