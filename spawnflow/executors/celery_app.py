"""The Celery application spawnflow's scheduler and its Celery workers share.

One task, :data:`TASK_NAME`, carries a workload (JSON text of
:class:`~spawnflow.comms.tasks.Workload`: ids and references only) to a queue. Messages
are acknowledged after the try ended (``acks_late``), one at a time per free slot
(prefetch 1), and go back to the queue when the worker that held them is lost; a
message delivered twice never runs a try twice, since a try only starts through the
conditional write on its task instance row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.tasks import Workload

if TYPE_CHECKING:
    from celery import Celery

TASK_NAME = "spawnflow.run_workload"


class CeleryMissing(UserError):
    """[core] executor = celery without Celery installed."""


def make_app(settings: Settings) -> Celery:
    """A Celery application configured from ``[celery]``."""
    try:
        from celery import Celery
    except ImportError:
        raise CeleryMissing(
            "[core] executor is celery, but Celery is not installed: "
            "pip install 'spawnflow[celery]'"
        ) from None
    config = settings.celery
    app = Celery("spawnflow", set_as_current=False)
    app.conf.update(
        broker_url=config.broker_url,
        result_backend=config.result_backend or None,
        task_ignore_result=not config.result_backend,
        task_default_queue=config.default_queue,
        task_serializer="json",
        accept_content=["json"],
        # After the try: a worker lost mid-try gives its message back.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # A broker that goes away does not stop the tries that run: they write their
        # state to the database, and a copy of a message delivered again meanwhile
        # waits on the try that runs (True would end them all, as a cold stop does).
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_concurrency=config.worker_concurrency,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=config.operation_timeout,
        # A worker's log goes through spawnflow's logging, not Celery's own set-up.
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        # Long tries outlive Redis' default visibility timeout (an hour) less often.
        broker_transport_options={"visibility_timeout": 6 * 3600},
    )
    return app


def encode(workload: Workload) -> str:
    return msgspec.json.encode(workload).decode()


def decode(text: str) -> Workload:
    return msgspec.json.decode(text, type=Workload)


def queue_of(workload: Workload, settings: Settings) -> str:
    return workload.queue or settings.celery.default_queue
