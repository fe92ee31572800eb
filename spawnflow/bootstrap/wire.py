"""The wire protocol between a parent and its child (law 6).

Messages are typed ``msgspec`` structs, encoded as msgpack and framed by the
``multiprocessing`` connection (a length header on POSIX pipes, message mode on
Windows pipes). Every message class that derives from :class:`Message` is
registered when it is defined, so a :class:`Channel` decodes any of them by its
``type`` tag. Requests carry an ``id`` and are answered by exactly one
:class:`Response` with the same ``id``; errors are typed :class:`ErrorResponse`.

This module lives in ``bootstrap`` because the launcher's boot handshake
(:class:`Ready`, :class:`BootFailed`) speaks it; ``spawnflow.comms`` adds the
messages of the roles.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, Union

import msgspec


class ProtocolError(Exception):
    """Bytes on a channel that are not a known message."""


class _Codec:
    encoder = msgspec.msgpack.Encoder()
    decoder: msgspec.msgpack.Decoder | None = None

    @classmethod
    def decode(cls, data: bytes) -> Message:
        if cls.decoder is None:
            # Registered concrete classes: a tagged union msgspec can dispatch on.
            cls.decoder = msgspec.msgpack.Decoder(Union[tuple(Message._registry)])  # noqa: UP007
        try:
            return cls.decoder.decode(data)
        except msgspec.DecodeError as error:
            raise ProtocolError(f"undecodable message: {_explain(data, error)}") from None


def _explain(data: bytes, error: msgspec.DecodeError) -> str:
    """Name an unknown message type: the usual cause is a module imported on one side only."""
    try:
        tag = msgspec.msgpack.decode(data).get("type")
    except (msgspec.DecodeError, AttributeError):
        return str(error)
    if isinstance(tag, str) and tag not in {cls.__name__ for cls in Message._registry}:
        return f"unknown message type {tag!r}; import the module that defines it in this process"
    return str(error)


class Message(msgspec.Struct, tag=True, frozen=True, kw_only=True):
    """Base of every message; subclasses register themselves for decoding.

    Subclasses repeat ``frozen=True``: msgspec inherits it anyway, but type checkers
    treat a subclass without it as a non-frozen dataclass deriving from a frozen one.
    """

    _registry: ClassVar[list[type[Message]]] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The class name is the type tag on the wire, so it must be unique.
        clash = next((c for c in Message._registry if c.__name__ == cls.__name__), None)
        if clash is not None and clash.__qualname__ == cls.__qualname__:
            if clash.__module__ != cls.__module__:
                raise TypeError(
                    f"message type {cls.__module__}.{cls.__name__} has the name of "
                    f"{clash.__module__}.{clash.__name__}; message names must be unique"
                )
            Message._registry.remove(clash)  # the same module loaded again
        Message._registry.append(cls)
        _Codec.decoder = None


class Request(Message, frozen=True):
    """A message that expects exactly one :class:`Response` carrying the same ``id``."""

    id: int


class Response(Message, frozen=True):
    """The answer to the request with the same ``id``."""

    id: int


class ErrorResponse(Response, frozen=True):
    """A request failed; ``kind`` is a stable code the caller can branch on."""

    kind: str
    message: str


class Ready(Message, frozen=True):
    """Sent by the child's bootstrap once it is ready to call its target."""

    pid: int
    role: str
    method: str
    boot_seconds: float


class BootFailed(Message, frozen=True):
    """Sent by the child's bootstrap when a boot stage failed; the child then exits."""

    pid: int
    role: str
    stage: str
    error: str
    message: str


_M = TypeVar("_M", bound=Message)


class Channel:
    """One end of a parent/child connection that sends and receives :class:`Message`.

    Several threads may :meth:`call` at once: one of them reads at a time and hands
    each response to the thread that waits for its id.
    """

    def __init__(self, connection: Any):
        self.connection = connection
        self._ids = itertools.count(1)
        #: Messages that arrived while :meth:`call` waited for another id.
        self._early: list[Message] = []
        self._lock = threading.Lock()
        #: Ids that callers wait for, and the responses read for them by another caller.
        self._waiting: set[int] = set()
        self._answers: dict[int, Response] = {}
        self._reader_busy = False
        self._turn = threading.Condition()

    def next_id(self) -> int:
        """A request id unique on this end of the channel."""
        return next(self._ids)

    def send(self, message: Message) -> None:
        data = _Codec.encoder.encode(message)
        with self._lock:  # whole frames, even when several threads send
            self.connection.send_bytes(data)

    def call(self, request: Request, timeout: float | None = None) -> Response:
        """Send ``request`` and return the response that carries its id.

        Responses are matched by id, never by position: anything else that arrives
        meanwhile is kept for :meth:`recv`. An ErrorResponse is returned, not raised.
        TimeoutError if no answer comes within ``timeout`` seconds.
        """
        with self._turn:
            self._waiting.add(request.id)
        try:
            self.send(request)
            found = self._take(lambda: self._answers.pop(request.id, None), timeout)
            if found is None:
                raise TimeoutError(f"no answer within {timeout:g} seconds")
            return found
        finally:
            with self._turn:
                self._waiting.discard(request.id)
                self._answers.pop(request.id, None)

    def poll(self, timeout: float | None = 0.0) -> bool:
        return bool(self._early) or self.connection.poll(timeout)

    def recv(self, timeout: float | None = None) -> Message:
        """The next message that no :meth:`call` waits for; TimeoutError if none arrives
        within ``timeout`` seconds. EOFError when the other end closed (its process exited).
        """
        found = self._take(lambda: self._early.pop(0) if self._early else None, timeout)
        if found is None:
            raise TimeoutError(f"no message within {timeout:g} seconds")
        return found

    def _take(self, pick: Callable[[], _M | None], timeout: float | None) -> _M | None:
        """Wait until ``pick()`` (called under the lock) finds something; None on timeout.

        One thread at a time reads the connection and files each message where it
        belongs: a response to a waiting call by its id, anything else for recv().
        The others wait on the condition and look again after every message.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            reading = False
            message: Message | None = None
            try:
                with self._turn:
                    while (found := pick()) is None and self._reader_busy:
                        if not self._turn.wait(_left(deadline)):
                            return pick()  # filed just before the time ran out, or None
                    if found is not None:
                        return found
                    reading = True
                    self._reader_busy = True
                message = self._read(_left(deadline))
            except TimeoutError:
                if not reading:
                    raise
                return None
            finally:
                if reading:
                    with self._turn:
                        # Filed before the next reader may start, so nothing is missed.
                        if isinstance(message, Response) and message.id in self._waiting:
                            self._answers[message.id] = message
                        elif message is not None:
                            self._early.append(message)
                        self._reader_busy = False
                        self._turn.notify_all()

    def _read(self, timeout: float | None) -> Message:
        if timeout is not None and not self.connection.poll(timeout):
            raise TimeoutError(f"no message within {timeout:g} seconds")
        return _Codec.decode(self.connection.recv_bytes())

    def fileno(self) -> int:
        return self.connection.fileno()

    def close(self) -> None:
        self.connection.close()


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def encode(message: Message) -> bytes:
    """The bytes of ``message`` as they travel on a channel."""
    return _Codec.encoder.encode(message)


def decode(data: bytes) -> Message:
    """The message in ``data``; ProtocolError if it is not one."""
    return _Codec.decode(data)
