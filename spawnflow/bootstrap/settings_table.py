"""The one declarative table of settings.

Loading (:mod:`spawnflow.bootstrap.settings`), ``spawnflow config show`` and the
README's settings table all read :data:`OPTIONS`; nothing else lists settings, so
they cannot drift apart. Each kind below turns raw input (text from the
environment or the command line, native TOML values from the config file) into a
value, or says what it allows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from spawnflow.bootstrap.paths import Locations
from spawnflow.bootstrap.platform import START_METHODS, Platform


class InvalidValue(ValueError):
    """Raised by a kind when a value does not fit; carries what would fit instead."""

    def __init__(self, allowed: str, reason: str | None = None):
        super().__init__(allowed)
        self.allowed = allowed
        self.reason = reason


class Context(msgspec.Struct, frozen=True):
    """What a kind may need to interpret a value."""

    platform: Platform
    #: Relative paths are taken from here: the config file's folder, or the cwd.
    base_dir: Path


class Kind(msgspec.Struct, frozen=True):
    """A type of setting: its name in docs, what it allows, and how to parse it."""

    name: str
    allowed: str
    parse: Callable[[Any, Context], Any]
    #: How a value is shown in messages (a URL hides its password).
    show: Callable[[Any], str] = repr

    def convert(self, raw: Any, context: Context) -> Any:
        return self.parse(raw, context)


def _integer(minimum: int) -> Kind:
    allowed = f"a whole number of at least {minimum}"

    def parse(raw: Any, _: Context) -> int:
        if isinstance(raw, bool):
            raise InvalidValue(allowed)
        if isinstance(raw, str):
            try:
                raw = int(raw.strip())
            except ValueError:
                raise InvalidValue(allowed) from None
        if not isinstance(raw, int) or raw < minimum:
            raise InvalidValue(allowed)
        return raw

    return Kind("integer", allowed, parse)


def _children(what: str) -> Kind:
    """A number of child processes one parent watches in one wait (a channel and a
    sentinel each), bounded where the OS bounds such a wait (Windows: 63 objects)."""
    whole = _integer(1)

    def parse(raw: Any, context: Context) -> int:
        count = whole.parse(raw, context)
        most = context.platform.children_per_wait()
        if most is not None and count > most:
            raise InvalidValue(
                f"a whole number from 1 to {most}",
                reason=f"{context.platform.display_name} waits on at most "
                f"{context.platform.wait_limit} objects at once, two per {what}",
            )
        return count

    return Kind("integer", whole.allowed, parse)


def _seconds(minimum: float, maximum: float = 7 * 24 * 3600) -> Kind:
    allowed = f"a number of seconds from {minimum:g} to {maximum:g}"

    def parse(raw: Any, _: Context) -> float:
        if isinstance(raw, bool):
            raise InvalidValue(allowed)
        if isinstance(raw, str):
            try:
                raw = float(raw.strip())
            except ValueError:
                raise InvalidValue(allowed) from None
        # NaN and infinity fail the range check too: a stop must always end.
        if not isinstance(raw, int | float) or not minimum <= raw <= maximum:
            raise InvalidValue(allowed)
        return float(raw)

    return Kind("seconds", allowed, parse)


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _parse_boolean(raw: Any, _: Context) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
        return raw.strip().lower() in _TRUE
    raise InvalidValue("true or false")


BOOLEAN = Kind("boolean", "true or false", _parse_boolean)


def _choice(*choices: str) -> Kind:
    allowed = "one of " + ", ".join(choices)
    name = ", ".join(choices[:-1]) + " or " + choices[-1]

    def parse(raw: Any, _: Context) -> str:
        if isinstance(raw, str) and raw.strip().upper() in {c.upper() for c in choices}:
            return next(c for c in choices if c.upper() == raw.strip().upper())
        raise InvalidValue(allowed)

    return Kind(name, allowed, parse)


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmg]i?b|b)?$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3,
               "kib": 1024, "mib": 1024**2, "gib": 1024**3}  # fmt: skip


def _parse_size(raw: Any, _: Context) -> int:
    allowed = ("a size in bytes, or with a unit: 10MB, 512KiB, 50 MiB (KB, MB and GB are "
               "powers of 1000, KiB, MiB and GiB of 1024)")  # fmt: skip
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise InvalidValue(allowed)
    if isinstance(raw, int):
        if raw < 0:
            raise InvalidValue(allowed)
        return raw
    match = _SIZE.match(raw.strip())
    if match is None:
        raise InvalidValue(allowed)
    number, unit = match.groups()
    unit = (unit or "b").lower()
    if unit == "b" and "." in number:
        raise InvalidValue(allowed)  # a fraction of a byte
    return int(float(number) * _SIZE_UNITS[unit])


SIZE = Kind("size", "a size in bytes or with a unit (10MB, 512KiB)", _parse_size)


def _choice_free(what: str) -> Kind:
    """A non-empty word without spaces (a queue name)."""

    def parse(raw: Any, _: Context) -> str:
        text = str(raw).strip() if raw is not None else ""
        if text and not any(c.isspace() for c in text):
            return text
        raise InvalidValue(f"{what}, without spaces")

    return Kind("name", f"{what}, without spaces", parse)


def _parse_path(raw: Any, context: Context) -> Path:
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidValue("a path")
    path = Path(raw.strip()).expanduser()
    return path if path.is_absolute() else context.base_dir / path


PATH = Kind("path", "a path", _parse_path)

#: What [core] xcom_backend accepts besides the built-in names.
_IMPORT_STRING = re.compile(r"^[A-Za-z_][\w.]*[:.][A-Za-z_]\w*$")


def _parse_xcom_backend(raw: Any, _: Context) -> str:
    allowed = "database, objectstorage, or a backend class as module:Class"
    if isinstance(raw, str) and raw.strip().lower() in ("database", "objectstorage"):
        return raw.strip().lower()
    if isinstance(raw, str) and _IMPORT_STRING.match(raw.strip()):
        return raw.strip()
    raise InvalidValue(allowed)


def _parse_executor(raw: Any, _: Context) -> str:
    allowed = "local, celery, or an executor class as module:Class"
    if isinstance(raw, str) and raw.strip().lower() in ("local", "celery"):
        return raw.strip().lower()
    if isinstance(raw, str) and _IMPORT_STRING.match(raw.strip()):
        return raw.strip()
    raise InvalidValue(allowed)


EXECUTOR = Kind("executor", "local, celery, or an executor class as module:Class", _parse_executor)


def _parse_broker_url(raw: Any, _: Context) -> str:
    text = str(raw).strip() if raw is not None else ""
    if text.split("://", 1)[0] in ("redis", "rediss", "amqp", "amqps", "pyamqp") and "://" in text:
        return text
    raise InvalidValue("a Redis or RabbitMQ URL: redis://host:6379/0 or amqp://user:pass@host//")


def _parse_result_backend(raw: Any, _: Context) -> str:
    text = str(raw).strip() if raw is not None else ""
    if not text or "://" in text:
        return text
    raise InvalidValue("empty (none) or a Celery result backend URL such as redis://host/1")


XCOM_BACKEND = Kind(
    "backend", "database, objectstorage, or a backend class as module:Class", _parse_xcom_backend
)
#: [state_store] backend takes the same names.
STATE_BACKEND = XCOM_BACKEND


def _parse_storage_url(raw: Any, _: Context) -> str:
    if isinstance(raw, str) and (not raw.strip() or "://" in raw):
        return raw.strip().rstrip("/")
    raise InvalidValue("a URL such as file:///srv/xcoms, memory://xcoms or s3://bucket/prefix")


def _parse_json_object(raw: Any, _: Context) -> dict:
    import json

    allowed = 'a JSON object, e.g. {"endpoint_url": "http://127.0.0.1:9000"}'
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise InvalidValue(allowed) from None
        if isinstance(value, dict):
            return value
    raise InvalidValue(allowed)


def is_secret_key(name: str) -> bool:
    """Whether an option key such as ``secret`` or ``aws_access_key_id`` holds a credential."""
    return any(word in name.lower() for word in ("secret", "password", "token", "key"))


def _show_options(value: Any) -> str:
    if not isinstance(value, dict):  # not shown: the text may hold credentials
        return "a text that is not a JSON object"
    return repr({k: "***" if is_secret_key(k) else v for k, v in value.items()})


JSON_OBJECT = Kind("JSON object", 'a JSON object, e.g. {"endpoint_url": "http://127.0.0.1:9000"}',
                   _parse_json_object, show=_show_options)  # fmt: skip


STORAGE_URL = Kind(
    "URL", "a URL such as file:///srv/xcoms, memory://xcoms or s3://bucket/prefix",
    _parse_storage_url,
)  # fmt: skip


def _start_method(optional: bool) -> Kind:
    allowed = "one of " + ", ".join(START_METHODS)
    if optional:
        allowed += ", or empty to use [core] mp_start_method"

    def parse(raw: Any, context: Context) -> str | None:
        if not isinstance(raw, str):
            raise InvalidValue(allowed)
        method = raw.strip().lower()
        if optional and not method:
            return None
        if method not in START_METHODS:
            raise InvalidValue(allowed)
        offered = context.platform.start_methods
        if method not in offered:
            raise InvalidValue(
                "one of " + ", ".join(offered),
                reason=f"{context.platform.display_name} has no {method!r} start method",
            )
        return method

    return Kind("start method", allowed, parse)


_URL = re.compile(r"^(sqlite|postgresql|mysql|mariadb)(\+\w+)?://", re.IGNORECASE)


def hide_password(url: Any) -> str:
    """``url`` as text with the password of its user part replaced by ``***``."""
    return re.sub(r"^([^:/]+://[^:/@]*:)[^@/]*@", r"\1***@", str(url))


def _parse_host(raw: Any, _: Context) -> str:
    text = str(raw).strip()
    if any(c.isspace() for c in text) or "/" in text:
        raise InvalidValue("a host name or IP address, or empty for none")
    return text


HOST = Kind("host", "a host name or IP address, or empty for none", _parse_host)


def _parse_metric_prefix(raw: Any, _: Context) -> str:
    text = str(raw).strip()
    if not re.fullmatch(r"[A-Za-z0-9_.-]*", text):
        raise InvalidValue(METRIC_PREFIX.allowed)
    return text


METRIC_PREFIX = Kind(
    "metric prefix", "letters, digits, '_', '-' and '.', or empty for none", _parse_metric_prefix
)


def _parse_database_url(raw: Any, _: Context) -> str:
    from urllib.parse import urlsplit

    allowed = "a database URL starting sqlite://, postgresql://, mysql:// or mariadb://"
    if not isinstance(raw, str) or not _URL.match(raw.strip()):
        raise InvalidValue(allowed)
    try:
        urlsplit(raw.strip()).port  # noqa: B018 - reading the port is the check
    except ValueError:
        raise InvalidValue(allowed, reason="its port is not a number") from None
    return raw.strip()


DATABASE_URL = Kind(
    "database URL",
    "a sqlite, postgresql, mysql or mariadb URL",
    _parse_database_url,
    show=lambda value: repr(hide_password(value)),
)


class Option(msgspec.Struct, frozen=True):
    """One setting: where it lives, what it accepts, its default and its help."""

    section: str
    key: str
    kind: Kind
    #: A value, or a function of the resolved locations and platform.
    default: Any
    help: str
    #: A command-line flag of the ``spawnflow`` group that sets this option.
    flag: str | None = None

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}"

    @property
    def env_var(self) -> str:
        return f"SPAWNFLOW__{self.section.upper()}__{self.key.upper()}"

    def default_for(self, locations: Locations, platform: Platform) -> Any:
        return self.default(locations, platform) if callable(self.default) else self.default

    def describe_default(self) -> str:
        """The default as the docs show it (defaults that depend on the OS are described)."""
        return _DEFAULT_DESCRIPTIONS.get(
            self.name, "" if self.default is None else str(self.default)
        )


SECTIONS = {
    "core": "Process model and where Dags live.",
    "database": "The metadata database.",
    "logging": "Log level and files.",
    "dag_processor": "The Dag processor and its file parsers.",
    "scheduler": "The scheduler.",
    "executor": "The executor and its workers.",
    "triggerer": "The triggerer.",
    "xcom": "Where XCom values are kept, and the per-task helper process of other backends.",
    "state_store": "Where the state stores of tasks and asset watchers keep their values.",
    "metrics": "Where metrics go (StatsD), if anywhere.",
    "celery": "The Celery executor: its broker and its workers.",
}

#: The components whose children may use a start method of their own (law 2).
COMPONENTS = ("dag_processor", "scheduler", "executor", "triggerer")


def _component_method(component: str) -> Option:
    return Option(
        component,
        "mp_start_method",
        _start_method(optional=True),
        None,
        f"Start method of the {component.replace('_', ' ')}'s processes (which roles: "
        "`spawnflow info`); empty means [core] mp_start_method.",
    )


OPTIONS: tuple[Option, ...] = (
    Option(
        "core",
        "mp_start_method",
        _start_method(optional=False),
        lambda _, platform: platform.default_start_method,
        "How every child process is started: fork, forkserver or spawn.",
        flag="--start-method",
    ),
    Option(
        "core",
        "dags_folder",
        PATH,
        lambda locations, _: locations.default_dags_folder,
        "Folder the Dag processor reads Dag files from.",
    ),
    Option(
        "core",
        "load_examples",
        BOOLEAN,
        True,
        "Load the example Dags that ship with spawnflow.",
    ),
    Option(
        "core",
        "dags_are_paused_at_creation",
        BOOLEAN,
        False,
        "New Dags start paused: no runs until `spawnflow dags unpause`.",
    ),
    Option(
        "core",
        "parallelism",
        _integer(1),
        32,
        "Task instances that may run at once, across all Dags.",
    ),
    Option(
        "core",
        "max_xcom_size",
        _integer(1),
        1_048_576,
        "Largest XCom value, in bytes of its JSON form, whichever backend keeps it: a "
        "larger push fails, and so does a larger value a backend gives back.",
    ),
    Option(
        "core",
        "executor",
        EXECUTOR,
        "local",
        "What runs the scheduler's task supervisors: `local` (worker processes on the "
        "scheduler's machine), `celery` (spawnflow celery workers on any machine, through "
        "[celery] broker_url) or a subclass of `spawnflow.executors.BaseExecutor` as "
        "module:Class.",
    ),
    Option(
        "core",
        "xcom_backend",
        XCOM_BACKEND,
        "database",
        "Where XCom values live: `database` (in the metadata database), `objectstorage` "
        "(see [xcom]) or a subclass of `spawnflow.sdk.XComBackend` named as module:Class.",
    ),
    Option(
        "core",
        "stop_grace_period",
        _seconds(0),
        10.0,
        "Seconds a warm stop waits for a process tree to finish before killing it.",
    ),
    Option(
        "core",
        "child_boot_timeout",
        _seconds(1),
        120.0,
        "Seconds a child process may take from its launch until it reports ready (starting "
        "an interpreter and importing, under spawn on a busy machine). Every other budget "
        "(parse, call and execution timeouts) starts when the child is ready.",
    ),
    Option(
        "core",
        "callback_timeout",
        _seconds(0.1),
        60.0,
        "Seconds the callbacks of a task (after its outcome) or of a Dag run may take "
        "before their process is stopped; the task's or the run's state stays as it was. "
        "With an execution_timeout, the longer of the two also bounds what runs around a "
        "task's execute (templates, on_execute_callback, storing its return value).",
    ),
    Option(
        "database",
        "url",
        DATABASE_URL,
        lambda locations, _: "sqlite:///" + locations.default_database_file.as_posix(),
        "SQLAlchemy URL of the metadata database (SQLite, PostgreSQL, MySQL or MariaDB).",
        flag="--database-url",
    ),
    Option(
        "database",
        "connect_timeout",
        _integer(1),
        10,
        "Seconds to wait for a database server to accept a connection.",
    ),
    Option(
        "database",
        "sqlite_busy_timeout",
        _seconds(0),
        30.0,
        "Seconds SQLite waits for a lock held by another process.",
    ),
    Option(
        "database",
        "outage_tolerance",
        _seconds(0),
        300.0,
        "Seconds a process keeps retrying while the database is out of reach (a restart, a "
        "failover, a network blip) before it gives up with an error; 0 gives up at once.",
    ),
    Option(
        "logging",
        "level",
        _choice("DEBUG", "INFO", "WARNING", "ERROR"),
        "INFO",
        "Lowest level written to the log files and, by the components, to the console.",
        flag="--log-level",
    ),
    Option(
        "logging",
        "base_log_folder",
        PATH,
        lambda locations, _: locations.log_dir,
        "Folder for the per-role log files (JSON lines).",
    ),
    Option(
        "logging",
        "format",
        _choice("auto", "text", "json"),
        "auto",
        "What the components (scheduler, dag-processor, triggerer, standalone) and the CLI "
        "write on the console: `auto`, human-readable lines, coloured on a terminal (unless "
        "NO_COLOR is set); `text`, the same never coloured; `json`, JSON lines of the log "
        "files' shape. The log files are always JSON lines.",
    ),
    Option(
        "logging",
        "max_file_size",
        SIZE,
        50 * 1024**2,
        "Size at which a per-role log file is rotated: `<role>.log` becomes "
        "`<role>.log.1` and so on. Bytes, or with a unit: 10MB, 512KiB, 50 MiB; 0 never "
        "rotates. A try's log is never rotated.",
    ),
    Option(
        "logging",
        "backup_count",
        _integer(1),
        5,
        "Rotated per-role log files kept (`<role>.log.1` to `<role>.log.N`); the oldest goes.",
    ),
    Option(
        "logging",
        "remote_base_url",
        STORAGE_URL,
        "",
        "fsspec URL to which each try's log is copied once the try's state is written "
        "(file:///mnt/logs, s3://bucket/logs with s3fs), under the same relative path as "
        "in base_log_folder; `spawnflow tasks logs` reads it there when the local file is "
        "missing. Empty: off.",
    ),
    Option(
        "logging",
        "remote_options",
        JSON_OBJECT,
        {},
        "Options for the fsspec filesystem of remote_base_url, as a JSON object (for S3: "
        "`endpoint_url`, `key`, `secret`, `client_kwargs`).",
    ),
    *(_component_method(component) for component in COMPONENTS),
    Option(
        "scheduler",
        "loop_interval",
        _seconds(0.05, 60),
        1.0,
        "Longest the scheduler waits between two looks at Dag runs and tasks.",
    ),
    Option(
        "scheduler",
        "task_heartbeat_timeout",
        _seconds(1),
        60.0,
        "Seconds without a heartbeat after which a running task is failed (or retried); "
        "keep it above [core] stop_grace_period.",
    ),
    Option(
        "scheduler",
        "max_partition_evaluations_per_loop",
        _integer(1),
        500,
        "Wake requests one scheduler loop answers at most, evaluating the asset-driven "
        "pending runs they name; the rest wait for the next loops, oldest first.",
    ),
    Option(
        "scheduler",
        "asset_partition_resync_interval",
        _seconds(1),
        3600.0,
        "Seconds between two resync passes over every asset-driven pending run (one also "
        "runs at start-up): the safety net for an event written without its wake request. "
        "A pass takes at most a tenth of each loop's evaluations while it has work.",
    ),
    Option(
        "scheduler",
        "job_heartbeat_timeout",
        _seconds(1),
        30.0,
        "Seconds without a heartbeat after which a scheduler counts as gone.",
    ),
    Option(
        "scheduler",
        "task_queued_timeout",
        _seconds(1),
        600.0,
        "Seconds a task instance may stay queued after its executor sent it (a lost "
        "message, a worker that died before it started the try) before it is queued "
        "again, up to [scheduler] num_stuck_in_queued_retries times, then failed.",
    ),
    Option(
        "scheduler",
        "num_stuck_in_queued_retries",
        _integer(0),
        2,
        "Times a task instance that stayed queued longer than [scheduler] "
        "task_queued_timeout is queued again (its try not counted) before it is failed.",
    ),
    Option(
        "executor",
        "parallelism",
        _children("worker process"),
        4,
        "Most worker processes of the local executor, started as tasks need them; each "
        "supervises one task at a time (at most 31 on Windows).",
    ),
    Option(
        "executor",
        "task_mp_start_method",
        _choice("inherit", "same"),
        "inherit",
        "The default start method of multiprocessing inside a task: inherit (Python's for "
        "this OS: fork on Linux before Python 3.14) or same (the task process's own, so "
        "that a task that works only under fork fails on Linux as it would on macOS and "
        "Windows; the pytest plugin sets it).",
    ),
    Option(
        "executor",
        "worker_idle_timeout",
        _seconds(0),
        60.0,
        "Seconds a worker may wait for a task before it leaves; the next task that finds "
        "no idle worker starts one (at most [executor] parallelism). 0: workers stay "
        "once started.",
    ),
    Option(
        "executor",
        "heartbeat_interval",
        _seconds(0.05, 600),
        5.0,
        "Seconds between two heartbeats of a running task's supervisor.",
    ),
    Option(
        "dag_processor",
        "parsing_processes",
        _children("parsing process"),
        2,
        "Dag files parsed at the same time, each in a process of its own (at most 31 on Windows).",
    ),
    Option(
        "dag_processor",
        "parser_max_files",
        _integer(1),
        50,
        "Dag files one parsing process parses, one after the other, before a fresh one "
        "takes over; between two files it is put back as it was, and a file that leaves "
        "a thread, a process or a changed global behind is its last. 1: a fresh process "
        "for every file.",
    ),
    Option(
        "dag_processor",
        "file_parsing_timeout",
        _seconds(0.1),
        30.0,
        "Seconds a file may take to parse, counted from when it reaches a parser that is "
        "ready (never a parser's boot), before its parser's process tree is stopped.",
    ),
    Option(
        "dag_processor",
        "refresh_interval",
        _seconds(0),
        30.0,
        "Seconds after which an unchanged Dag file is parsed again.",
    ),
    Option(
        "dag_processor",
        "poll_interval",
        _seconds(0.1),
        5.0,
        "Seconds between two looks at the Dags folder when nothing is due.",
    ),
    Option(
        "xcom",
        "objectstorage_path",
        STORAGE_URL,
        "",
        "fsspec URL under which the objectstorage backend keeps values (s3:// needs s3fs).",
    ),
    Option(
        "xcom",
        "objectstorage_options",
        JSON_OBJECT,
        {},
        "Options for the fsspec filesystem of objectstorage_path, as a JSON object "
        "(for S3: `endpoint_url`, `key`, `secret`, `client_kwargs`).",
    ),
    Option(
        "xcom",
        "objectstorage_threshold",
        _integer(0),
        0,
        "Values smaller than this many bytes (as JSON) stay in the database; 0 offloads all.",
    ),
    Option(
        "xcom",
        "objectstorage_compression",
        _choice("none", "gzip"),
        "none",
        "Compression of the values the objectstorage backend writes.",
    ),
    Option(
        "xcom",
        "helper_call_timeout",
        _seconds(0.1),
        60.0,
        "Seconds one backend call may take in the XCom helper, counted from when it is sent "
        "(loading the backend: from when the helper is ready), before the helper is killed.",
    ),
    Option(
        "triggerer",
        "capacity",
        _integer(1),
        1000,
        "Triggers one triggerer runs at once, on its one event loop; more wait for it, or for "
        "another triggerer.",
    ),
    Option(
        "triggerer",
        "poll_interval",
        _seconds(0.05, 60),
        1.0,
        "Longest the triggerer waits between two looks for triggers to claim or cancel.",
    ),
    Option(
        "triggerer",
        "runner_idle_timeout",
        _seconds(0),
        60.0,
        "Seconds the trigger runner may run no trigger before it leaves; the first trigger "
        "to run after that starts one. 0: the runner stays once started.",
    ),
    Option(
        "triggerer",
        "heartbeat_timeout",
        _seconds(1),
        30.0,
        "Seconds without a heartbeat after which a triggerer counts as gone, and another "
        "takes over its triggers.",
    ),
    Option(
        "triggerer",
        "blocked_main_thread_warning_threshold",
        _seconds(0.001, 60),
        0.2,
        "Seconds an event loop may be blocked before a WARNING names what blocked it and "
        "the metric triggers.blocked_main_thread (tasks.blocked_main_thread in an async def "
        "task) counts it; on the triggerer's loop and in async def tasks.",
    ),
    Option(
        "state_store",
        "backend",
        STATE_BACKEND,
        "database",
        "Where state store values live: `database`, `objectstorage` (see the options below) "
        "or a subclass of `spawnflow.sdk.state.StateStoreBackend` named as module:Class. It "
        "runs in the process that uses the store (a task process, the trigger runner).",
    ),
    Option(
        "state_store",
        "objectstorage_path",
        STORAGE_URL,
        "",
        "fsspec URL under which the objectstorage backend keeps state values.",
    ),
    Option(
        "state_store",
        "objectstorage_options",
        JSON_OBJECT,
        {},
        "Options for the fsspec filesystem of objectstorage_path, as a JSON object.",
    ),
    Option(
        "state_store",
        "objectstorage_threshold",
        _integer(0),
        0,
        "Values smaller than this many bytes (as JSON) stay in the database; 0 offloads all.",
    ),
    Option(
        "state_store",
        "objectstorage_compression",
        _choice("none", "gzip"),
        "none",
        "Compression of the values the objectstorage backend writes.",
    ),
    Option(
        "metrics",
        "statsd_host",
        HOST,
        "",
        "Send metrics to the StatsD server on this host (UDP; needs the `statsd` extra); "
        "empty: metrics are kept in memory only.",
    ),
    Option("metrics", "statsd_port", _integer(1), 8125, "The StatsD server's UDP port."),
    Option(
        "metrics",
        "statsd_prefix",
        METRIC_PREFIX,
        "spawnflow",
        "The prefix of every metric's name.",
    ),
    Option(
        "celery",
        "broker_url",
        Kind("broker URL", "a redis:// or amqp:// URL", _parse_broker_url),
        "redis://127.0.0.1:6379/0",
        "Where the scheduler puts task instances for spawnflow celery workers: Redis "
        "(redis://) or RabbitMQ (amqp://).",
    ),
    Option(
        "celery",
        "result_backend",
        Kind("URL", "empty, or a Celery result backend URL", _parse_result_backend),
        "",
        "Where Celery keeps task results, if anywhere; spawnflow needs none (the "
        "scheduler reads how each try ended from the metadata database).",
    ),
    Option(
        "celery",
        "worker_concurrency",
        _integer(1),
        4,
        "Task instances one spawnflow celery worker runs at once (each in a task process "
        "of its own, under [executor] mp_start_method).",
    ),
    Option(
        "celery",
        "default_queue",
        _choice_free("a queue name"),
        "spawnflow",
        "The queue of task instances whose task names none (`queue=` on a task).",
    ),
    Option(
        "celery",
        "operation_timeout",
        _seconds(0.1),
        10.0,
        "Seconds the scheduler and `spawnflow celery status` wait for the broker before "
        "they say it cannot be reached.",
    ),
)


_DEFAULT_DESCRIPTIONS = {
    "core.mp_start_method": "forkserver on Linux, spawn on macOS and Windows",
    "core.dags_folder": "`<data dir>/dags`",
    "database.url": "SQLite file `<data dir>/spawnflow.db`",
    "logging.base_log_folder": "`<log dir>`",
    "logging.max_file_size": "50 MiB",
}

_BY_NAME = {option.name: option for option in OPTIONS}


def lookup(section: str, key: str) -> Option | None:
    """The option ``[section] key``, or None."""
    return _BY_NAME.get(f"{section}.{key}")


def names() -> list[str]:
    """Every option as ``section.key``."""
    return list(_BY_NAME)


def render_markdown() -> str:
    """The settings table for the README."""
    lines = [
        "| Setting | Environment variable | Type | Default | Description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for option in OPTIONS:
        default = option.describe_default() or "(empty)"
        flag = f" CLI: `{option.flag}`." if option.flag else ""
        lines.append(
            f"| `[{option.section}] {option.key}` | `{option.env_var}` | {option.kind.name} "
            f"| {default} | {option.help}{flag} |"
        )
    return "\n".join(lines)
