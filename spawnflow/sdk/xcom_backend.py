"""XCom backends: where the values tasks push are kept.

spawnflow turns a pushed value into JSON text in the task process (see
:mod:`spawnflow.sdk.xcom`; a type it cannot write fails the task there, naming the key
and the type). A backend decides what happens to that text next. The default,
``database``, keeps it in the metadata database. Any other backend runs in the task's
XCom helper process, a child that the task's supervisor starts on the first call that
needs it and stops when the task ends: backends keep clients, caches and threads that
are not fork-safe, and the executor worker must never hold them.

Write a backend by subclassing :class:`XComBackend` and naming the class in
``[core] xcom_backend`` as ``module:Class``::

    import fsspec
    from spawnflow.sdk import XComBackend


    class BucketBackend(XComBackend):
        def __init__(self, settings):
            super().__init__(settings)
            self.fs, self.root = fsspec.core.url_to_fs("s3://my-bucket/xcoms")

        def store(self, data, *, ref):
            path = f"{self.root}/{ref.dag_id}/{ref.run_id}/{ref.task_id}/{ref.key}"
            self.fs.pipe_file(path, data)
            return f"s3://{path}"

        def load(self, reference, *, ref):
            return self.fs.cat_file(reference)

        def purge(self, reference, *, ref):
            self.fs.rm_file(reference)

The hooks run in this order: ``serialize`` then ``store`` for a push, ``load`` then
``deserialize`` for a pull, ``purge`` when a task instance is cleared or a value is
replaced. Inside the helper, :class:`spawnflow.sdk.Variable` works as in a task: it
asks the supervisor, never the database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from spawnflow.comms.xcoms import XComRef

if TYPE_CHECKING:
    from spawnflow.bootstrap.settings import Settings


class XComBackend:
    """Base class of XCom backends; the hooks' defaults keep the JSON text as it is.

    Subclasses must implement :meth:`store`, :meth:`load` and :meth:`purge`. The
    class is instantiated once per helper process with the settings snapshot.
    """

    #: Run this backend's calls in the task's XCom helper process (the default).
    #: A backend that is safe in a long-lived process that forks, and cheap to
    #: create, may set this to False: its calls then run in the executor worker.
    in_helper: ClassVar[bool] = True

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def serialize(self, text: str, *, ref: XComRef) -> bytes:
        """The bytes to keep for a value whose JSON text is ``text`` (compress, encrypt…)."""
        return text.encode()

    def deserialize(self, data: bytes, *, ref: XComRef) -> str:
        """The JSON text back from the bytes :meth:`serialize` made."""
        return data.decode()

    def store(self, data: bytes, *, ref: XComRef) -> str | None:
        """Keep ``data``; return the reference the metadata row keeps, or None to keep
        the value itself in the database instead."""
        raise NotImplementedError(f"{type(self).__name__} does not implement store()")

    def load(self, reference: str, *, ref: XComRef) -> bytes:
        """The bytes :meth:`store` kept under ``reference``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement load()")

    def purge(self, reference: str, *, ref: XComRef) -> None:
        """Delete what :meth:`store` kept under ``reference`` (gone already is fine)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement purge()")


class DatabaseBackend(XComBackend):
    """The default: every value is kept in the metadata database, by the supervisor."""

    in_helper: ClassVar[bool] = False

    def store(self, data: bytes, *, ref: XComRef) -> str | None:
        return None

    def load(self, reference: str, *, ref: XComRef) -> bytes:
        raise LookupError(
            f"XCom {ref.key!r} of task {ref.task_id!r} is kept at {reference}, by a backend "
            "other than the database; set [core] xcom_backend to that backend to read it"
        )

    def purge(self, reference: str, *, ref: XComRef) -> None:
        raise LookupError(
            f"XCom {ref.key!r} of task {ref.task_id!r} is kept at {reference}, by a backend "
            "other than the database; it cannot be deleted from here"
        )
