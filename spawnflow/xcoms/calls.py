"""Calls to an XCom backend: through a helper process, or in this process when the
backend's class asks for it.

:class:`XComHelper` owns the helper child and the calls waiting on it, in one FIFO of
(call, continuation) pairs. Only the call at the head is in flight: the helper runs
calls one at a time anyway, and a second large request written while the helper is
busy (or is asking us for a Variable) could block both sides. Answers are matched to
calls by request id. The owner's wait loop waits on :meth:`XComHelper.wait_objects`
and hands what became ready to :meth:`XComHelper.service`, so that a supervisor keeps
heartbeating and enforcing ``execution_timeout`` while a call runs.

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
from spawnflow.bootstrap.child import ChildBootError
from spawnflow.bootstrap.settings import Settings

BACKEND_ERROR = "XCOM_BACKEND_ERROR"
BACKEND_TIMEOUT = "XCOM_BACKEND_TIMEOUT"

Continuation = Callable[[wire.Response], None]


class _Call:
    __slots__ = ("continuation", "make", "request", "sent_at")

    def __init__(self, make: Callable[[int], wire.Request], continuation: Continuation):
        self.make, self.continuation = make, continuation
        self.request: wire.Request | None = None
        self.sent_at: float | None = None


class XComHelper:
    """The XCom helper of one task (or one command), started on the first call."""

    def __init__(
        self,
        settings: Settings,
        *,
        method: str | None = None,
        context: dict[str, Any] | None = None,
        answer_request: Callable[[wire.Request], wire.Response] | None = None,
        on_event: Callable[..., None] | None = None,
    ):
        self.settings = settings
        self.method = method
        self.context = context or {}
        #: Answers what the helper itself asks (Variables), on the helper's behalf.
        self.answer_request = answer_request
        self.on_event = on_event or (lambda *_, **__: None)
        self.timeout = settings.xcom.helper_call_timeout
        self.child: launcher.Child | None = None
        self._described = False
        self._started_at = 0.0
        self.calls: collections.deque[_Call] = collections.deque()
        #: Helpers started so far (one per failure, plus the first).
        self.started = 0

    # -- what the owner calls ---------------------------------------------------------

    def submit(self, make: Callable[[int], wire.Request], continuation: Continuation) -> None:
        """Queue the call ``make(id)`` builds; ``continuation(response)`` runs when it ends."""
        self.calls.append(_Call(make, continuation))
        if self.child is not None:
            self._send_head()
            return
        try:
            self._start()
        except Exception as error:  # noqa: BLE001 - no helper: the calls fail, typed
            self._fail_all(BACKEND_ERROR, f"the XCom helper could not be started: "
                           f"{type(error).__name__}: {error}")  # fmt: skip

    def call(self, make: Callable[[int], wire.Request]) -> wire.Response:
        """Make one call and wait for its answer (for commands; supervisors use submit)."""
        from multiprocess.connection import wait

        answers: list[wire.Response] = []
        self.submit(make, answers.append)
        while not answers:
            wait(self.wait_objects(), timeout=self.seconds_to_deadline())
            self.service()
        return answers[0]

    def wait_objects(self) -> list:
        if self.child is None:
            return []
        return [self.child.channel.connection, self.child.sentinel]

    def seconds_to_deadline(self) -> float | None:
        """How long until the call in flight times out (None: nothing in flight)."""
        head = self.calls[0] if self.calls else None
        if self.child is not None and not self._described:
            return max(0.0, self._started_at + self.timeout - time.monotonic())
        if head is None or head.sent_at is None:
            return None
        return max(0.0, head.sent_at + self.timeout - time.monotonic())

    def service(self) -> None:
        """Read what the helper sent, settle answered calls, notice death and timeouts."""
        from multiprocess.connection import wait

        child = self.child
        if child is None:
            return
        try:
            while self.child is child and child.channel.poll():
                if not self._read(child):
                    return
        except (EOFError, OSError):
            self._lost(child, None)
            return
        except wire.ProtocolError as error:  # it sent what we cannot read: unusable
            self._lost(child, f"the XCom helper (pid {child.pid}) sent a message that cannot "
                       f"be read ({error})")  # fmt: skip
            return
        if self.child is not child:
            return  # a continuation replaced or stopped it meanwhile
        # The sentinel first (one poll): the full check reads /proc, on every wake-up.
        if wait([child.sentinel], 0) and not child.is_alive():
            self._lost(child, None)
            return
        head = self.calls[0] if self.calls else None
        now = time.monotonic()
        if head is not None and head.sent_at is not None and now - head.sent_at > self.timeout:
            self._timed_out(head)
        elif not self._described and now - self._started_at > self.timeout:
            self._fail_all(BACKEND_TIMEOUT, "the XCom helper did not load [core] xcom_backend "
                           f"within [xcom] helper_call_timeout ({self.timeout:g} s)")  # fmt: skip
            self.stop(grace=0)

    def pending(self) -> int:
        """Calls waiting, the one in flight included."""
        return len(self.calls)

    def stop(self, grace: float | None = None) -> None:
        """Stop the helper; calls still waiting fail."""
        if self.child is not None:
            child, self.child = self.child, None
            child.stop(grace=grace if grace is not None else 5.0)
            self.on_event("xcom helper stopped", helper_pid=child.pid)
        self._fail_all(BACKEND_ERROR, "the XCom helper was stopped before the call ended")

    # -- inside -----------------------------------------------------------------------

    def _start(self) -> None:
        spec = launcher.ChildSpec(
            "xcom-helper", "spawnflow.processors.xcom_helper:serve",
            {"context": self.context}, settings=self.settings,
            kill_with_parent=True,  # a backend must not outlive the supervisor that used it
        )  # fmt: skip
        self.child = launcher.launch(spec, method=self.method, component="executor")
        self._described = False
        self._started_at = time.monotonic()
        self.started += 1
        self.on_event("xcom helper started", helper_pid=self.child.pid)

    def _read(self, child: launcher.Child) -> bool:
        """Handle one message of the helper; False if the helper is gone or unusable."""
        from spawnflow.comms.xcoms import BackendDescription

        if child.ready is None:
            try:
                child.wait_ready(timeout=0)
            except ChildBootError as error:
                self._lost(child, str(error))
                return False
            return True
        message = child.channel.recv()
        if isinstance(message, BackendDescription):
            if message.error is not None:
                self._fail_all(BACKEND_ERROR, message.error)
                self.stop(grace=1)
                return False
            self._described = True
            self._send_head()
        elif isinstance(message, wire.Response):
            head = self.calls[0] if self.calls else None
            if head is not None and head.request is not None and head.request.id == message.id:
                self.calls.popleft()
                self._settle(head, message)
                self._send_head()
        elif isinstance(message, wire.Request):
            child.channel.send(self._answer_for_helper(message))
        return True

    def _answer_for_helper(self, request: wire.Request) -> wire.Response:
        if self.answer_request is None:
            return wire.ErrorResponse(
                id=request.id, kind="UNKNOWN_REQUEST",
                message=f"{type(request).__name__} cannot be answered here",
            )  # fmt: skip
        try:
            return self.answer_request(request)
        except Exception as error:  # noqa: BLE001 - the helper gets a typed answer instead
            return wire.ErrorResponse(
                id=request.id, kind="LOOKUP_FAILED",
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
        try:
            self.child.channel.send(head.request)
        except OSError:
            self._lost(self.child, None)

    def _timed_out(self, head: _Call) -> None:
        child = self.child
        self.child = None
        if child is not None:
            child.stop(grace=0)  # its state is unknown: no warm stop
            self.on_event("xcom helper killed: a call timed out", level="warning",
                          helper_pid=child.pid, helper_call_timeout=self.timeout)  # fmt: skip
        self.calls.popleft()
        self._settle(head, wire.ErrorResponse(
            id=head.request.id, kind=BACKEND_TIMEOUT,
            message=f"the XCom backend call {type(head.request).__name__} took more than "
            f"[xcom] helper_call_timeout ({self.timeout:g} s); its helper process was killed",
        ))  # fmt: skip
        self._fail_all(BACKEND_ERROR, "its XCom helper was killed after an earlier call timed out")

    def _lost(self, child: launcher.Child, why: str | None) -> None:
        """``child`` died or became unusable: make sure it is gone, fail what waited."""
        if self.child is not child:
            return  # already replaced
        self.child = None
        status = child.stop(grace=0)  # reaps it; kills it first if it still runs
        if why is None:
            how = status.describe(meaning=False) if status is not None else "stopped answering"
            why = f"the XCom helper (pid {child.pid}) ended ({how})"
        self.on_event("xcom helper lost", level="warning", helper_pid=child.pid, reason=why)
        self._fail_all(BACKEND_ERROR, f"{why} while the call waited for it")

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
        from spawnflow.processors.xcom_helper import answer

        self._ids += 1
        continuation(answer(self.backend, make(self._ids)))

    def wait_objects(self) -> list:
        return []

    def seconds_to_deadline(self) -> float | None:
        return None

    def service(self) -> None:
        pass

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
