"""Backends for benchmarks/xcom_calls.py."""

from spawnflow.xcoms.objectstorage import ObjectStorageBackend


class FilesInWorker(ObjectStorageBackend):
    """The objectstorage backend run in the executor worker: the baseline without a helper."""

    in_helper = False
