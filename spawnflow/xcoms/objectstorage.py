"""The ``objectstorage`` XCom backend: values as objects under an fsspec URL.

``[xcom] objectstorage_path`` names the place (``file://``, ``s3://bucket/prefix`` with
s3fs, or any other fsspec protocol; ``memory://`` lives in one helper process, so its
values last only as long as one task's helper: for trying things out); values whose JSON
text is smaller than ``[xcom] objectstorage_threshold`` bytes stay in the database;
``[xcom] objectstorage_compression = gzip`` compresses what is written. An object's
name says whether it is compressed, so changing the setting never breaks what is
already stored. ``[xcom] objectstorage_options`` goes to the fsspec filesystem (for
S3: ``endpoint_url``, ``key``, ``secret``); otherwise credentials come from the
protocol's usual sources (for S3, the AWS environment variables and files).

Runs in the XCom helper process only: fsspec keeps caches and, for S3, an event
loop thread, neither of which may live in a process that forks task processes.
"""

from __future__ import annotations

import gzip
import hashlib
import uuid
from typing import Any
from urllib.parse import quote

import fsspec

from spawnflow.sdk.xcom_backend import XComBackend, XComRef

GZIP_SUFFIX = ".json.gz"


class ObjectStorageBackend(XComBackend):
    """Keeps each value as one object; the metadata row keeps the object's URL."""

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        path = settings.xcom.objectstorage_path
        if not path:
            raise ValueError(
                "[core] xcom_backend is objectstorage but [xcom] objectstorage_path is empty; "
                "set it to a URL such as file:///srv/xcoms or s3://bucket/prefix"
            )
        self.base = path
        self.threshold = settings.xcom.objectstorage_threshold
        self.gzip = settings.xcom.objectstorage_compression == "gzip"
        self._folders: set[str] = set()
        try:
            options = dict(settings.xcom.objectstorage_options)
            self.fs, self.root = fsspec.core.url_to_fs(path, **options)
        except (ImportError, TypeError, ValueError) as error:
            raise ValueError(
                f"[xcom] objectstorage_path {path!r} cannot be used: {error}"
            ) from None

    def serialize(self, text: str, *, ref: XComRef) -> bytes:
        data = text.encode()
        # mtime=0: the same value gives the same bytes.
        return gzip.compress(data, mtime=0) if self.gzip else data

    def deserialize(self, data: bytes, *, ref: XComRef) -> str:
        if data[:2] == b"\x1f\x8b":  # gzip's magic number
            data = gzip.decompress(data)
        return data.decode()

    def store(self, data: bytes, *, ref: XComRef) -> str | None:
        if ref.size < self.threshold:
            return None
        name = f"{_file_safe(ref.key)}-{uuid.uuid4().hex}"
        name += GZIP_SUFFIX if self.gzip else ".json"
        folder = "/".join(_file_safe(part) for part in (ref.dag_id, ref.run_id, ref.task_id))
        relative = f"{folder}/{name}"
        if folder not in self._folders:  # once per task, not once per value
            self.fs.makedirs(f"{self.root}/{folder}", exist_ok=True)
            self._folders.add(folder)
        self.fs.pipe_file(f"{self.root}/{relative}", data)
        return f"{self.base}/{relative}"

    def load(self, reference: str, *, ref: XComRef) -> bytes:
        try:
            return self.fs.cat_file(self._path(reference))
        except FileNotFoundError:
            raise FileNotFoundError(
                f"XCom {ref.key!r} of task {ref.task_id!r} was kept at {reference}, "
                "which no longer exists"
            ) from None

    def purge(self, reference: str, *, ref: XComRef) -> None:
        try:
            self.fs.rm_file(self._path(reference))
        except FileNotFoundError:
            pass

    def _path(self, reference: str) -> str:
        if not reference.startswith(self.base + "/"):
            raise ValueError(
                f"{reference} is not under [xcom] objectstorage_path {self.base}; "
                "it was stored with another setting"
            )
        return f"{self.root}/{reference[len(self.base) + 1 :]}"


def _file_safe(part: str, longest: int = 120) -> str:
    """``part`` quoted for an object name; a long one is cut and made unique by a hash,
    so that the name stays within the 255 bytes local file systems allow."""
    quoted = quote(part, safe="")
    if len(quoted) <= longest:
        return quoted
    return f"{quoted[: longest - 17]}~{hashlib.sha256(part.encode()).hexdigest()[:16]}"
