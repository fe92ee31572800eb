"""What the ``spawnflow dags`` commands read and change, without click.

Everything here reads what the Dag processor stored; nothing imports a Dag file,
except :func:`check_file`, which parses one in child processes, never here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.bootstrap.errors import UserError
from spawnflow.models.dag import DagFileModel, DagModel, ImportErrorModel, SerializedDagModel
from spawnflow.sdk import serialize


class UnknownDag(UserError):
    """A Dag id the Dag processor has not stored."""


def get_dag(dag_id: str) -> tuple[DagModel, serialize.SerializedDag]:
    """The stored Dag and its serialized document; UnknownDag if there is none."""
    with orm.session_scope() as session:
        model = session.get(DagModel, dag_id)
        stored = session.get(SerializedDagModel, dag_id)
        if model is None or stored is None:
            known = session.scalars(select(DagModel.dag_id)).all()
            raise UnknownDag(_unknown(dag_id, known))
        return model, serialize.decode(stored.data).dag


def _unknown(dag_id: str, known: Sequence[str]) -> str:
    import difflib

    close = difflib.get_close_matches(dag_id, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else "; see `spawnflow dags list`"
    return f"there is no Dag {dag_id!r}{hint}"


def import_errors() -> list[ImportErrorModel]:
    with orm.session_scope() as session:
        return list(session.scalars(select(ImportErrorModel).order_by(ImportErrorModel.fileloc)))


def report() -> list[DagFileModel]:
    """Per-file parse statistics, slowest first."""
    with orm.session_scope() as session:
        query = select(DagFileModel).order_by(DagFileModel.duration.desc(), DagFileModel.fileloc)
        return list(session.scalars(query))


def set_paused(dag_id: str, paused: bool) -> bool:
    """Pause or unpause; returns whether the state changed."""
    with orm.session_scope() as session:
        model = session.get(DagModel, dag_id)
        if model is None:
            raise UnknownDag(_unknown(dag_id, session.scalars(select(DagModel.dag_id)).all()))
        changed = model.is_paused != paused
        model.is_paused = paused
        return changed


# -- dags check ---------------------------------------------------------------------


@dataclass
class MethodParse:
    """What parsing one file found under one start method."""

    method: str
    ok: bool
    dags: dict[str, str]  # dag id -> hash of its serialized form
    tasks: int
    error: str | None
    seconds: float


def check_file(
    path: str, methods: list[str], timeout: float, dags_folder: str | None = None
) -> list[MethodParse]:
    """Parse ``path`` in a file-parser child under each of ``methods``, as the processor would."""
    import time

    from spawnflow.bootstrap import launcher
    from spawnflow.processors.dag_processor.messages import ParseResult
    from spawnflow.processors.dag_processor.parsing import PARSER_TARGET

    results = []
    for method in methods:
        started = time.monotonic()
        spec = launcher.ChildSpec(
            "file-parser", PARSER_TARGET, {"path": path, "dags_folder": dags_folder}
        )
        child = launcher.launch(spec, method=method)
        message, error = None, None
        try:
            child.wait_ready()  # the boot has a budget of its own ([core] child_boot_timeout)
            message = child.channel.recv(timeout=timeout)
        except TimeoutError:
            error = f"timed out after {timeout:g} seconds"
        except (EOFError, launcher.ChildBootError):
            pass
        status = child.stop(grace=5) if child.is_alive() else child.join(timeout=30)
        assert status is not None  # stop() always reaps; join() reaps an exited child at once
        if isinstance(message, ParseResult):
            error = message.error
            dags = {d.dag_id: serialize.dag_hash(d) for d in message.dags}
            tasks = sum(len(d.tasks) for d in message.dags)
        else:
            error = error or f"the parser {status.describe(meaning=False)} before it reported"
            dags, tasks = {}, 0
        results.append(
            MethodParse(method, error is None, dags, tasks, error, time.monotonic() - started)
        )
    return results


def differences(results: list[MethodParse]) -> list[str]:
    """Sentences saying where the methods disagree (empty when they all agree)."""
    found = []
    ids = {method.method: set(method.dags) for method in results}
    everyone = set().union(*ids.values()) if ids else set()
    for dag_id in sorted(everyone):
        missing = [m for m, present in ids.items() if dag_id not in present]
        if missing:
            found.append(f"Dag {dag_id!r} is missing under {', '.join(missing)}")
            continue
        hashes = {m.dags[dag_id] for m in results}
        if len(hashes) > 1:
            found.append(f"Dag {dag_id!r} differs between start methods")
    outcomes = {m.method: m.ok for m in results}
    if len(set(outcomes.values())) > 1:
        failing = [m for m, ok in outcomes.items() if not ok]
        found.append(f"the file loads under some start methods but not under {', '.join(failing)}")
    return found
