"""The ``objectstorage`` XCom and state store backends: values as objects under an
fsspec URL.

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

from spawnflow.sdk.state import StateRef, StateStoreBackend
from spawnflow.sdk.xcom_backend import XComBackend, XComRef

GZIP_SUFFIX = ".json.gz"


class ObjectFolder:
    """Objects under one fsspec URL: what the XCom and state store backends share.

    ``section`` names the settings section the options came from, for messages.
    """

    def __init__(self, section: str, path: str, options: dict[str, Any], compression: str):
        if not path:
            raise ValueError(
                f"[{section}] objectstorage_path is empty; set it to a URL such as "
                "file:///srv/values or s3://bucket/prefix"
            )
        self.section, self.base = section, path
        self.gzip = compression == "gzip"
        self._folders: set[str] = set()
        try:
            self.fs, self.root = fsspec.core.url_to_fs(path, **dict(options))
        except (ImportError, TypeError, ValueError) as error:
            raise ValueError(
                f"[{section}] objectstorage_path {path!r} cannot be used: {error}"
            ) from None

    def encode(self, text: str) -> bytes:
        data = text.encode()
        # mtime=0: the same value gives the same bytes.
        return gzip.compress(data, mtime=0) if self.gzip else data

    @staticmethod
    def decode(data: bytes) -> str:
        if data[:2] == b"\x1f\x8b":  # gzip's magic number
            data = gzip.decompress(data)
        return data.decode()

    def write(self, parts: tuple[str, ...], key: str, data: bytes) -> str:
        """Write a new object for ``key`` under the folder ``parts``; its URL."""
        name = f"{_file_safe(key)}-{uuid.uuid4().hex}"
        name += GZIP_SUFFIX if self.gzip else ".json"
        folder = "/".join(_file_safe(part) for part in parts)
        if folder not in self._folders:  # once per folder, not once per value
            self.fs.makedirs(f"{self.root}/{folder}", exist_ok=True)
            self._folders.add(folder)
        self.fs.pipe_file(f"{self.root}/{folder}/{name}", data)
        return f"{self.base}/{folder}/{name}"

    def read(self, reference: str, what: str) -> bytes:
        try:
            return self.fs.cat_file(self._path(reference))
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{what} was kept at {reference}, which no longer exists"
            ) from None

    def remove(self, reference: str) -> None:
        try:
            self.fs.rm_file(self._path(reference))
        except FileNotFoundError:
            pass

    def _path(self, reference: str) -> str:
        if not reference.startswith(self.base + "/"):
            raise ValueError(
                f"{reference} is not under [{self.section}] objectstorage_path {self.base}; "
                "it was stored with another setting"
            )
        return f"{self.root}/{reference[len(self.base) + 1 :]}"


class ObjectStorageBackend(XComBackend):
    """Keeps each value as one object; the metadata row keeps the object's URL."""

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        options = settings.xcom
        self.objects = ObjectFolder("xcom", options.objectstorage_path,
                                    options.objectstorage_options,
                                    options.objectstorage_compression)  # fmt: skip
        self.base, self.fs, self.root = self.objects.base, self.objects.fs, self.objects.root
        self.threshold = options.objectstorage_threshold

    def serialize(self, text: str, *, ref: XComRef) -> bytes:
        return self.objects.encode(text)

    def deserialize(self, data: bytes, *, ref: XComRef) -> str:
        return self.objects.decode(data)

    def store(self, data: bytes, *, ref: XComRef) -> str | None:
        if ref.size < self.threshold:
            return None
        return self.objects.write((ref.dag_id, ref.run_id, ref.task_id), ref.key, data)

    def load(self, reference: str, *, ref: XComRef) -> bytes:
        return self.objects.read(reference, f"XCom {ref.key!r} of task {ref.task_id!r}")

    def purge(self, reference: str, *, ref: XComRef) -> None:
        self.objects.remove(reference)


class ObjectStorageStateBackend(StateStoreBackend):
    """The ``objectstorage`` state store backend: each value one object under
    ``[state_store] objectstorage_path`` (``task/<dag>/<run>/<task>/`` or
    ``asset/<hash of the URI>/``), smaller ones in the database."""

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        options = settings.state_store
        self.objects = ObjectFolder("state_store", options.objectstorage_path,
                                    options.objectstorage_options,
                                    options.objectstorage_compression)  # fmt: skip
        self.threshold = options.objectstorage_threshold

    def serialize(self, text: str, *, ref: StateRef) -> bytes:
        return self.objects.encode(text)

    def deserialize(self, data: bytes, *, ref: StateRef) -> str:
        return self.objects.decode(data)

    def store(self, data: bytes, *, ref: StateRef) -> str | None:
        if ref.size < self.threshold:
            return None
        if ref.scope == "asset":
            parts: tuple[str, ...] = ("asset", hashlib.sha256(ref.owner[0].encode()).hexdigest())
        else:
            parts = (ref.scope, *ref.owner)
        return self.objects.write(parts, ref.key, data)

    def load(self, reference: str, *, ref: StateRef) -> bytes:
        return self.objects.read(reference, f"state {ref.key!r} of {'/'.join(ref.owner)}")

    def purge(self, reference: str, *, ref: StateRef) -> None:
        self.objects.remove(reference)


def _file_safe(part: str, longest: int = 120) -> str:
    """``part`` quoted for an object name; a long one is cut and made unique by a hash,
    so that the name stays within the 255 bytes local file systems allow."""
    quoted = quote(part, safe="")
    if len(quoted) <= longest:
        return quoted
    return f"{quoted[: longest - 17]}~{hashlib.sha256(part.encode()).hexdigest()[:16]}"
