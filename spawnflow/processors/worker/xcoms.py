"""The supervisor's side of a task's XComs: metadata rows, and the backend's calls.

With the database backend a push or pull is answered at once from the database. With
any other backend the value goes to the backend (through the task's XCom helper, see
:mod:`spawnflow.xcoms.calls`) and the task's request is answered when the backend's
call ends: the row is written then, so a value the backend could not store leaves no
row, and a stored value is never silently put in the database instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import exc, select

from spawnflow.bootstrap import orm, wire
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.states import ErrorKind
from spawnflow.comms.tasks import Done, Workload, XComPull, XComPush, XComValue
from spawnflow.comms.xcoms import LoadXCom, PurgeXCom, StoreXCom, XComLoaded, XComRef, XComStored
from spawnflow.models import lookups
from spawnflow.models.mapped import run_xcom
from spawnflow.models.run import DagRun, TaskInstance, XCom
from spawnflow.xcoms import BackendChoice
from spawnflow.xcoms.dispatch import PURGE_TRIES

#: The longest XCom key the database column holds.
MAX_KEY_LENGTH = 250


class XComService:
    """Answers a task's XComPush and XComPull; ``reply`` sends an answer to the task."""

    def __init__(
        self,
        workload: Workload,
        settings: Settings,
        choice: BackendChoice,
        runner: Any,
        this_try: Callable[[], tuple],
        reply: Callable[[wire.Response], None],
        on_event: Callable[..., None],
    ):
        self.workload, self.settings, self.choice = workload, settings, choice
        #: What runs the backend's calls (None for the database backend).
        self.runner = runner
        self.this_try, self.reply, self.on_event = this_try, reply, on_event
        #: Set once the task process is gone: a value stored after that has nobody to
        #: acknowledge it, so it is purged rather than written.
        self.task_ended = False

    def handle(self, request: XComPush | XComPull) -> None:
        """Answer ``request`` now or, when the backend must be asked, once it answered."""
        try:
            if isinstance(request, XComPush):
                self._push(request)
            else:
                self._pull(request)
        except exc.SQLAlchemyError as error:
            self.reply(database_error(request, error))
        except Exception as error:  # noqa: BLE001 - the task gets a typed answer, always
            self.reply(wire.ErrorResponse(
                id=request.id, kind=ErrorKind.SUPERVISOR_ERROR,
                message=f"the supervisor could not answer {type(request).__name__}: "
                f"{type(error).__name__}: {error}",
            ))  # fmt: skip

    # -- push -------------------------------------------------------------------------

    def _push(self, request: XComPush) -> None:
        workload = self.workload
        if len(request.key) > MAX_KEY_LENGTH or not request.key:
            self.reply(wire.ErrorResponse(
                id=request.id, kind=ErrorKind.XCOM_KEY_INVALID,
                message=f"XCom key {request.key[:60]!r} of task {workload.task_id!r} "
                f"must be 1 to {MAX_KEY_LENGTH} characters long",
            ))  # fmt: skip
            return
        limit, size = self.settings.core.max_xcom_size, len(request.value.encode())
        if size > limit:  # whatever keeps it: a pull must be able to read it back
            self.reply(wire.ErrorResponse(
                id=request.id, kind=ErrorKind.XCOM_TOO_LARGE,
                message=f"XCom {request.key!r} of task {workload.task_id!r} is {size} bytes; "
                f"[core] max_xcom_size is {limit}",
            ))  # fmt: skip
            return
        if self.runner is None:
            response, replaced = self._write(request, None)
            if replaced is not None:
                self.on_event("a replaced XCom's stored value was left in place "
                              "(another backend keeps it)", level="warning",
                              reference=replaced)  # fmt: skip
            self.reply(response)
            return
        # Whether the try still runs is checked when the row is written: a value stored
        # for a try that was cleared meanwhile is purged again (rare), which costs less
        # than one more transaction on every push.
        ref = self._ref(request.key, size)

        def stored(answer: wire.Response) -> None:
            if isinstance(answer, wire.ErrorResponse):
                self.reply(wire.ErrorResponse(id=request.id, kind=answer.kind,
                                              message=answer.message))  # fmt: skip
                return
            assert isinstance(answer, XComStored)  # the helper's only other answer to a store
            if self.task_ended:  # nobody waits for it: it must not stay behind
                if answer.reference is not None:
                    self._purge(answer.reference, ref)
                return
            try:
                response, replaced = self._write(request, answer.reference)
            except exc.SQLAlchemyError as error:
                response, replaced = database_error(request, error), None
            if isinstance(response, wire.ErrorResponse) and answer.reference is not None:
                self._purge(answer.reference, ref)  # no row points at it
            if replaced is None:
                self.reply(response)
                return

            def replied(failure: str | None) -> None:
                # The new value is kept either way; the task hears of an old one left behind.
                self.reply(response if failure is None else wire.ErrorResponse(
                    id=request.id, kind=ErrorKind.XCOM_BACKEND_ERROR,
                    message=f"XCom {request.key!r} of task {workload.task_id!r} was replaced, "
                    f"but the value it replaces is left at {replaced}: {failure}",
                ))  # fmt: skip

            self._purge(replaced, self._ref(request.key), then=replied)

        self.runner.submit(lambda id: StoreXCom(id=id, ref=ref, value=request.value), stored)

    def _write(self, request: XComPush, reference: str | None) -> tuple[wire.Response, str | None]:
        """Write the row (the value, or the backend's reference) if this try still runs;
        the answer, and the reference of a value it replaced, which is left to purge."""
        workload = self.workload
        with orm.session_scope() as session:
            if not self._running(session):
                return self._not_running(request), None
            row = session.scalar(select(XCom).where(
                XCom.task_instance_id == workload.ti_id, XCom.key == request.key
            ))  # fmt: skip
            if row is None:
                row = XCom(task_instance_id=workload.ti_id, key=request.key)
                session.add(row)
            replaced = row.reference
            row.value = None if reference is not None else request.value
            row.reference, row.size = reference, len(request.value.encode())
        return Done(id=request.id), replaced if replaced != reference else None

    def _running(self, session: Any) -> bool:
        """Whether this try still runs; its row is locked until the session ends."""
        query = select(TaskInstance.id).where(*self.this_try()).with_for_update()
        return session.scalar(query) is not None

    def _not_running(self, request: wire.Request) -> wire.ErrorResponse:
        # Cleared or failed from outside meanwhile: it must not leave values.
        return wire.ErrorResponse(
            id=request.id, kind=ErrorKind.TASK_NOT_RUNNING,
            message=f"task {self.workload.task_id!r} is no longer running this try",
        )  # fmt: skip

    def _purge(
        self, reference: str, ref: XComRef, tries: int = PURGE_TRIES,
        then: Callable[[str | None], None] | None = None,
    ) -> None:  # fmt: skip
        """Have the backend delete ``reference``, trying again (on a new helper if the
        last one died); ``then`` gets None, or why the last try failed."""
        assert self.runner is not None  # only a backend in a helper keeps references

        def purged(answer: wire.Response) -> None:
            if not isinstance(answer, wire.ErrorResponse):
                if then is not None:
                    then(None)
            elif tries > 1:
                self._purge(reference, ref, tries - 1, then)
            else:
                self.on_event("purging a stored XCom value failed", level="warning",
                              reference=reference, error=answer.message)  # fmt: skip
                if then is not None:
                    then(answer.message)

        self.runner.submit(lambda id: PurgeXCom(id=id, ref=ref, reference=reference), purged)

    # -- pull -------------------------------------------------------------------------

    def _pull(self, request: XComPull) -> None:
        workload = self.workload
        with orm.session_scope(write=False) as session:
            run_id = session.scalar(select(DagRun.id).where(
                DagRun.dag_id == workload.dag_id, DagRun.run_id == workload.run_id
            ))  # fmt: skip
            try:
                row = None if run_id is None else run_xcom(
                    session, run_id, request.task_id, request.key
                )  # fmt: skip
            except ValueError as error:  # a mapped task's values kept by a backend
                self.reply(wire.ErrorResponse(
                    id=request.id, kind=ErrorKind.XCOM_BACKEND_ERROR, message=str(error)
                ))  # fmt: skip
                return
        if row is None or row.reference is None:
            self.reply(XComValue(id=request.id, value=row.value if row else None))
            return
        ref = XComRef(workload.dag_id, workload.run_id, request.task_id, request.key,
                      row.size or 0)  # fmt: skip
        if self.runner is None:
            self.reply(wire.ErrorResponse(
                id=request.id, kind=ErrorKind.XCOM_BACKEND_ERROR,
                message=f"XCom {request.key!r} of task {request.task_id!r} is kept at "
                f"{row.reference} by another backend, but [core] xcom_backend is database",
            ))  # fmt: skip
            return

        def loaded(answer: wire.Response) -> None:
            if isinstance(answer, wire.ErrorResponse):
                self.reply(wire.ErrorResponse(id=request.id, kind=answer.kind,
                                              message=answer.message))  # fmt: skip
            else:
                assert isinstance(answer, XComLoaded)  # the helper's only other answer to a load
                self.reply(XComValue(id=request.id, value=answer.value))

        reference = row.reference
        self.runner.submit(lambda id: LoadXCom(id=id, ref=ref, reference=reference), loaded)

    def _ref(self, key: str, size: int = 0) -> XComRef:
        workload = self.workload
        return XComRef(workload.dag_id, workload.run_id, workload.task_id, key, size)


def database_error(request: wire.Request, error: exc.SQLAlchemyError) -> wire.ErrorResponse:
    """The typed answer to a request the database failed."""
    return wire.ErrorResponse(
        id=request.id, kind=ErrorKind.DATABASE_ERROR,
        message=f"the supervisor could not answer {type(request).__name__}: "
        f"{orm.first_line(getattr(error, 'orig', None) or error)}",
    )  # fmt: skip


def answer_lookup(request: wire.Request) -> wire.Response:
    """Answer a Variable or Connection lookup (of a task or an XCom helper) from the
    database: the processes that ask never open it."""
    from spawnflow.comms.tasks import ConnectionValue, GetConnection, GetVariable, VariableValue

    if isinstance(request, GetVariable):
        return VariableValue(id=request.id, value=lookups.read_variable(request.key))
    if isinstance(request, GetConnection):
        return ConnectionValue(id=request.id, connection=lookups.read_connection(request.conn_id))
    return wire.ErrorResponse(
        id=request.id, kind=ErrorKind.UNKNOWN_REQUEST, message=type(request).__name__
    )
