"""Try logs in object storage: ``[logging] remote_base_url`` and ``remote_options``.

A try's log has one relative path, ``dag_id=…/run_id=…/task_id=…/attempt=N.log``
(see :func:`spawnflow.processors.scheduler.queueing.attempt_log_key`): under each
machine's own ``[logging] base_log_folder``, and under ``remote_base_url``. The
supervisor copies the file there once the try's state is written; ``spawnflow tasks
logs`` reads the copy when its machine has no local file (the try ran elsewhere).

fsspec is imported here only when a URL is set, in the process that copies or reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spawnflow.bootstrap.settings import Settings


def enabled(settings: Settings) -> bool:
    """Whether ``[logging] remote_base_url`` is set."""
    return bool(settings.logging.remote_base_url)


def url_of(settings: Settings, key: str) -> str:
    """The remote copy's URL of the log whose relative path is ``key``."""
    return f"{settings.logging.remote_base_url.rstrip('/')}/{key}"


def key_of(path: Path | str) -> str:
    """The relative path of a try's log, from its path on any machine (the last four
    parts: the dag, run and task folders and the attempt's file)."""
    return "/".join(Path(path).parts[-4:])


def local_path(settings: Settings, log_file: str) -> Path:
    """A workload's ``log_file`` on this machine: a relative one (what the scheduler
    sends) under this machine's ``[logging] base_log_folder``, so that a worker with a
    home of its own writes under its own folder; an absolute one as it is."""
    from spawnflow.bootstrap import platform as platforms

    path = Path(log_file)
    if not path.is_absolute():
        path = Path(settings.logging.base_log_folder).joinpath(*log_file.split("/"))
    return platforms.usable_path(path)


def _filesystem(settings: Settings) -> tuple[Any, str]:
    import fsspec

    options: dict[str, Any] = dict(settings.logging.remote_options)
    return fsspec.core.url_to_fs(settings.logging.remote_base_url, **options)


def upload(settings: Settings, local: Path, key: str) -> str:
    """Copy ``local`` to the remote copy of ``key`` (replacing an older copy: a deferred
    try's log grows when it resumes); its URL. Raises what the filesystem raises."""
    fs, root = _filesystem(settings)
    target = f"{root.rstrip('/')}/{key}"
    fs.makedirs(target.rpartition("/")[0], exist_ok=True)
    fs.put_file(str(local), target)
    return url_of(settings, key)


def download(settings: Settings, key: str) -> bytes | None:
    """The remote copy of ``key``; None if there is none. Raises what the filesystem
    raises for any other failure."""
    fs, root = _filesystem(settings)
    try:
        with fs.open(f"{root.rstrip('/')}/{key}", "rb") as file:
            data: bytes = file.read()
    except FileNotFoundError:
        return None
    return data
