"""Calls to an XCom backend: through a helper process, or in this process when the
backend's class asks for it.

:class:`XComHelper` owns the helper child and the calls waiting on it, in one FIFO of
(call, continuation) pairs. Only the call at the head is in flight: the helper runs
calls one at a time anyway, and a second large request written while the helper is
busy (or is asking us for a Variable) could block both sides. Answers are matched to
calls by request id. The helper child is serviced by its owner's
:class:`~spawnflow.bootstrap.watch.Watch`, so that a supervisor keeps heartbeating and
enforcing ``execution_timeout`` while a call runs. A call's budget starts when it is
sent, the backend's loading when the helper is ready, never at launch.

A helper that dies fails every waiting call at once with ``XCOM_BACKEND_ERROR``; a
call that runs longer than ``[xcom] helper_call_timeout`` kills the helper (its state
is unknown), fails with ``XCOM_BACKEND_TIMEOUT``, and fails the calls behind it. The
next call starts a fresh helper.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

from spawnflow.bootstrap import launcher, wire
from spawnflow.bootstrap.child import ChildBootError, ExitStatus
from spawnflow.bootstrap.settings import Settings
from spawnflow.bootstrap.watch import Watch, Watched
from spawnflow.comms.states import ErrorKind

Continuation = Callable[[wire.Response], None]


class _Call:
    __slots__ = ("continuation", "make", "request", "sent_at")

    def __init__(self, make: Callable[[int], wire.Request], continuation: Continuation):
        self.make, self.continuation = make, continuation
        self.request: wire.Request | None = None
        self.sent_at: float | None = None


class XComHelper:
    """The XCom helper of one task (or one command), started on the first call.

    Its child is serviced by ``watch``, the owner's watch loop (a supervisor's, which
    also heartbeats and enforces ``execution_timeout`` meanwhile), or a watch of its own.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        watch: Watch | None = None,
        context: dict[str, Any] | None = None,
        answer_request: Callable[[wire.Request], wire.Response] | None = None,
        on_event: Callable[..., None] | None = None,
    ):
        self.settings = settings
        self.watch = watch or Watch()
        self.context = context or {}
        #: Answers what the helper itself asks (Variables), on the helper's behalf.
        self.answer_request = answer_request
        self.on_event = on_event or (lambda *_, **__: None)
        self.timeout = settings.xcom.helper_call_timeout
        self.child: launcher.Child | None = None
        self._watched: Watched | None = None
        self._described = False
        self.calls: collections.deque[_Call] = collections.deque()
        #: Helpers started so far (one per failure, plus the first).
        self.started = 0
        #: Stopped by its owner: later calls fail at once.
        self.closed = False

    # -- what the owner calls ---------------------------------------------------------

    def submit(self, make: Callable[[int], wire.Request], continuation: Continuation) -> None:
        """Queue the call ``make(id)`` builds; ``continuation(response)`` runs when it ends."""
        self.calls.append(_Call(make, continuation))
        if self.closed:
            self._fail_all(ErrorKind.XCOM_BACKEND_ERROR, "the XCom helper was stopped")
            return
        if self.child is not None:
            self._send_head()
            return
        try:
            self._start()
        except Exception as error:  # noqa: BLE001 - no helper: the calls fail, typed
            self._fail_all(ErrorKind.XCOM_BACKEND_ERROR, f"the XCom helper could not be started: "
                           f"{type(error).__name__}: {error}")  # fmt: skip

    def call(self, make: Callable[[int], wire.Request]) -> wire.Response:
        """Make one call and wait for its answer (for commands; supervisors use submit)."""
        answers: list[wire.Response] = []
        self.submit(make, answers.append)
        self.watch.until(lambda: bool(answers))
        return answers[0]

    def pending(self) -> int:
        """Calls waiting, the one in flight included."""
        return len(self.calls)

    def stop(self, grace: float | None = None) -> None:
        """Stop the helper for good: calls still waiting fail, and so do later ones (a
        continuation that retries must not start a helper nobody would stop)."""
        self.closed = True
        self._discard(grace)

    def _discard(self, grace: float | None = None) -> None:
        """Stop the current helper; calls still waiting fail; the next call starts anew."""
        if self.child is not None:
            child, self.child = self.child, None
            self._forget()
            child.stop(grace=grace if grace is not None else 5.0)
            self.on_event("xcom helper stopped", helper_pid=child.pid)
        self._fail_all(
            ErrorKind.XCOM_BACKEND_ERROR, "the XCom helper was stopped before the call ended"
        )

    # -- inside -----------------------------------------------------------------------

    def _start(self) -> None:
        spec = launcher.ChildSpec(
            "xcom-helper", "spawnflow.processors.xcom_helper:serve",
            {"context": self.context}, settings=self.settings,
            kill_with_parent=True,  # a backend must not outlive the supervisor that used it
        )  # fmt: skip
        self.child = launcher.launch(spec)
        self._described = False
        self.started += 1
        self._watched = self.watch.add(
            self.child, on_ready=self._on_ready, on_message=self._on_message,
            on_exit=self._on_exit, on_deadline=self._on_deadline,
            on_boot_failure=self._on_boot_failure, on_unreadable=self._on_unreadable,
        )  # fmt: skip
        self.on_event("xcom helper started", helper_pid=self.child.pid)

    def _forget(self) -> None:
        if self._watched is not None:
            self.watch.forget(self._watched)
            self._watched = None

    def _on_ready(self, watched: Watched) -> None:
        # Loading the backend is the first call: it gets a call's time, from Ready.
        watched.set_deadline(self.timeout)

    def _on_message(self, watched: Watched, message: wire.Message) -> None:
        from spawnflow.comms.xcoms import BackendDescription

        child = watched.child
        if child is not self.child:
            return
        if isinstance(message, BackendDescription):
            watched.set_deadline(None)
            if message.error is not None:
                self._fail_all(ErrorKind.XCOM_BACKEND_ERROR, message.error)
                self._discard(grace=1)
                return
            self._described = True
            self._send_head()
        elif isinstance(message, wire.Response):
            head = self.calls[0] if self.calls else None
            if head is not None and head.request is not None and head.request.id == message.id:
                self.calls.popleft()
                watched.set_deadline(None)
                self._settle(head, message)
                self._send_head()
        elif isinstance(message, wire.Request):
            try:
                child.channel.send(self._answer_for_helper(message))
            except OSError:
                pass  # gone: its exit is reported next

    def _on_unreadable(self, watched: Watched, error: Exception) -> None:
        if watched.child is self.child:
            self._lost(watched.child, f"the XCom helper (pid {watched.child.pid}) sent a "
                       f"message that cannot be read ({error})")  # fmt: skip

    def _on_exit(self, watched: Watched, status: ExitStatus) -> None:
        if watched.child is self.child:
            self._lost(watched.child, None, status)

    def _on_boot_failure(self, watched: Watched, error: ChildBootError) -> None:
        if watched.child is self.child:
            self._lost(watched.child, str(error).rstrip("."))

    def _on_deadline(self, watched: Watched) -> None:
        if watched.child is not self.child:
            return
        head = self.calls[0] if self.calls else None
        if not self._described:
            self._fail_all(
                ErrorKind.XCOM_BACKEND_TIMEOUT, "the XCom helper did not load [core] "
                f"xcom_backend within [xcom] helper_call_timeout ({self.timeout:g} s)",
            )  # fmt: skip
            self._discard(grace=0)
        elif head is not None and head.sent_at is not None:
            self._timed_out(head)

    def _answer_for_helper(self, request: wire.Request) -> wire.Response:
        if self.answer_request is None:
            return wire.ErrorResponse(
                id=request.id, kind=ErrorKind.UNKNOWN_REQUEST,
                message=f"{type(request).__name__} cannot be answered here",
            )  # fmt: skip
        try:
            return self.answer_request(request)
        except Exception as error:  # noqa: BLE001 - the helper gets a typed answer instead
            return wire.ErrorResponse(
                id=request.id, kind=ErrorKind.LOOKUP_FAILED,
                message=f"{type(request).__name__} failed: {type(error).__name__}: {error}",
            )  # fmt: skip

    def _send_head(self) -> None:
        if not self._described or not self.calls or self.child is None:
            return
        head = self.calls[0]
        if head.sent_at is not None:
            return  # in flight
        head.request = head.make(self.child.channel.next_id())
        head.sent_at = time.monotonic()
        if self._watched is not None:
            self._watched.set_deadline(self.timeout)  # the call's budget starts as it is sent
        try:
            self.child.channel.send(head.request)
        except OSError:
            self._lost(self.child, None)

    def _timed_out(self, head: _Call) -> None:
        assert head.request is not None  # only a call that was sent (sent_at set) times out
        child = self.child
        self.child = None
        self._forget()
        if child is not None:
            child.stop(grace=0)  # its state is unknown: no warm stop
            self.on_event("xcom helper killed: a call timed out", level="warning",
                          helper_pid=child.pid, helper_call_timeout=self.timeout)  # fmt: skip
        self.calls.popleft()
        self._settle(head, wire.ErrorResponse(
            id=head.request.id, kind=ErrorKind.XCOM_BACKEND_TIMEOUT,
            message=f"the XCom backend call {type(head.request).__name__} took more than "
            f"[xcom] helper_call_timeout ({self.timeout:g} s); its helper process was killed",
        ))  # fmt: skip
        self._fail_all(
            ErrorKind.XCOM_BACKEND_ERROR,
            "its XCom helper was killed after an earlier call timed out",
        )

    def _lost(self, child: launcher.Child, why: str | None,
              status: ExitStatus | None = None) -> None:  # fmt: skip
        """``child`` died or became unusable: make sure it is gone, fail what waited."""
        if self.child is not child:
            return  # already replaced
        self.child = None
        self._forget()
        if status is None:
            status = child.stop(grace=0)  # reaps it; kills it first if it still runs
        if why is None:
            why = f"the XCom helper (pid {child.pid}) ended ({status.describe(meaning=False)})"
        self.on_event("xcom helper lost", level="warning", helper_pid=child.pid, reason=why)
        self._fail_all(ErrorKind.XCOM_BACKEND_ERROR, f"{why} while the call waited for it")

    def _fail_all(self, kind: str, message: str) -> None:
        while self.calls:
            call = self.calls.popleft()
            request_id = call.request.id if call.request is not None else 0
            self._settle(call, wire.ErrorResponse(id=request_id, kind=kind, message=message))

    def _settle(self, call: _Call, response: wire.Response) -> None:
        """Run a call's continuation; its failure is logged, never lets the loop die."""
        try:
            call.continuation(response)
        except Exception as error:  # noqa: BLE001 - the owner's wait loop must go on
            self.on_event("an XCom call's continuation failed", level="error",
                          error=f"{type(error).__name__}: {error}")  # fmt: skip


class InProcessBackend:
    """A backend whose class says ``in_helper = False``: its calls run right here."""

    def __init__(self, backend: Any):
        self.backend = backend
        self._ids = 0

    def submit(self, make: Callable[[int], wire.Request], continuation: Continuation) -> None:
        from spawnflow.xcoms.dispatch import answer

        self._ids += 1
        continuation(answer(self.backend, make(self._ids)))

    def pending(self) -> int:
        return 0

    def stop(self, grace: float | None = None) -> None:
        pass


def runner_for(settings: Settings, choice: Any, **helper_options: Any):
    """What runs the backend's calls: None for the database, else a helper or in-process."""
    if choice.is_database:
        return None
    if choice.in_helper:
        return XComHelper(settings, **helper_options)
    from spawnflow import xcoms

    return InProcessBackend(xcoms.import_backend(choice.name)(settings))
