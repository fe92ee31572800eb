"""Shell completion: the arguments that complete Dag, task and run ids, and
``spawnflow completion bash|zsh|fish``.

click completes command and option names itself when the shell sets
``_SPAWNFLOW_COMPLETE``; the arguments and options declared here also offer the ids
stored in the metadata database. Every command that takes a DAG_ID, TASK_ID or RUN_ID
declares it with these, so that they complete alike everywhere.

A completion runs on each Tab press, in a process of its own, before any command's
callback (there is no :class:`~spawnflow.commands.state.State` and no logging): it
resolves the settings itself, waits for the database at most :data:`WAIT` seconds, and
offers nothing when there is no database, it is not migrated, or anything else goes
wrong. A traceback, or a wait, in the middle of a command line helps nobody.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from click.shell_completion import CompletionItem

#: The shells that click writes completion scripts for.
SHELLS = ("bash", "zsh", "fish")
#: The environment variable that asks the ``spawnflow`` console script to complete.
COMPLETE_VARIABLE = "_SPAWNFLOW_COMPLETE"
#: Seconds a completion waits for a database server, or for SQLite's lock.
WAIT = 2


def dag_id_argument(name: str = "dag_id", **attrs: Any) -> Callable:
    """A DAG_ID argument that completes the ids of the active Dags."""
    return click.argument(name, shell_complete=_dag_ids, **attrs)


def dag_id_option(*decls: str, **attrs: Any) -> Callable:
    """A ``--dag-id`` option that completes the ids of the active Dags."""
    return click.option(*decls, shell_complete=_dag_ids, metavar="DAG_ID", **attrs)


def task_id_argument(name: str = "task_id", **attrs: Any) -> Callable:
    """A TASK_ID argument that completes the tasks of the Dag named before it."""
    return click.argument(name, shell_complete=_task_ids, **attrs)


def task_id_option(*decls: str, **attrs: Any) -> Callable:
    """A ``--task-id`` option that completes the tasks of the Dag named before it."""
    return click.option(*decls, shell_complete=_task_ids, metavar="TASK_ID", **attrs)


def run_id_argument(name: str = "run_id", **attrs: Any) -> Callable:
    """A RUN_ID argument that completes the run ids of the Dag named before it
    (newest first) and ``latest``."""
    return click.argument(name, shell_complete=_run_ids, **attrs)


def run_id_option(*decls: str, **attrs: Any) -> Callable:
    """A ``--run-id`` option that completes the run ids of the Dag named before it."""
    return click.option(*decls, shell_complete=_run_ids, metavar="RUN_ID", **attrs)


def _dag_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    from spawnflow.services import completions

    return _offer(ctx, lambda: completions.dag_ids(incomplete))


def _task_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    from spawnflow.services import completions

    dag_id = _dag_id_given(ctx)
    return _offer(ctx, lambda: completions.task_ids(dag_id, incomplete)) if dag_id else []


def _run_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    from spawnflow.services import completions

    dag_id = _dag_id_given(ctx)
    return _offer(ctx, lambda: completions.run_ids(dag_id, incomplete)) if dag_id else []


def _dag_id_given(ctx: click.Context) -> str | None:
    """The Dag id given earlier on the line, as an argument or as ``--dag-id``."""
    return ctx.params.get("dag_id") or ctx.params.get("dag_id_option")


def _offer(ctx: click.Context, read: Callable[[], list[str]]) -> list[CompletionItem]:
    """What ``read`` finds in the database, or nothing if it cannot be read."""
    try:
        _install_settings(ctx)
        from spawnflow.bootstrap import orm

        orm.check_reachable()  # a SQLite file that is not there is reported, not created
        return [CompletionItem(value) for value in read()]
    except Exception:  # noqa: BLE001 - see the module's docstring: offer nothing, say nothing
        return []


def _install_settings(ctx: click.Context) -> None:
    """The settings the command line would run with (its ``--set`` and setting flags,
    parsed by click before it completes), but for short waits on the database."""
    from spawnflow.bootstrap import settings as settings_module
    from spawnflow.bootstrap.settings import Override
    from spawnflow.commands.state import State

    root = ctx.find_root()
    given = State.from_cli(root.params.get("assignments") or (), root.params).overrides
    quick = [Override(name, str(WAIT), "shell completion")
             for name in ("database.connect_timeout", "database.sqlite_busy_timeout")]  # fmt: skip
    overrides = [o for o in given if o.name not in {q.name for q in quick}] + quick
    settings_module.install(settings_module.resolve(overrides=overrides))


@click.command("completion", short_help="Print the shell completion script for bash, zsh or fish.")
@click.argument("shell", type=click.Choice(SHELLS))
def completion_command(shell: str) -> None:
    """Print the script that makes SHELL complete spawnflow's commands and options, and
    the Dag ids, task ids and run ids in the metadata database. Load it from the
    shell's start-up file:

    \b
      bash (4.4 or newer), ~/.bashrc:  eval "$(spawnflow completion bash)"
      zsh, ~/.zshrc:                   eval "$(spawnflow completion zsh)"
      fish:  spawnflow completion fish > ~/.config/fish/completions/spawnflow.fish
    """
    from click.shell_completion import get_completion_class

    root = click.get_current_context().find_root()
    shell_class = get_completion_class(shell)
    assert shell_class is not None  # click has a class for each of SHELLS
    # As click prints it for _SPAWNFLOW_COMPLETE=bash_source (the script ends its line).
    click.echo(shell_class(root.command, {}, "spawnflow", COMPLETE_VARIABLE).source(), nl=False)
